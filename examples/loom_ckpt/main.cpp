// loom-ckpt: a checkpoint directory without a model or a job.
//   loom-ckpt inspect DIR [--verify]   layout, files, tensors and pieces (--verify: every piece's CRC-32)
//   loom-ckpt verify DIR               sizes and CRC-32 of every file, and the piece tables (exit 1 if not)
//   loom-ckpt consolidate IN OUT       a sharded checkpoint as a loom-checkpoint-1 one of whole tensors
//   loom-ckpt export IN FILE           the weights alone, whole, as one safetensors file
// An encrypted checkpoint is read with --key-file (or LOOM_KEY_FILE), and what consolidate and
// export write is then encrypted under the same key (io/at_rest.hpp; loom-crypt decrypt makes a
// plain copy).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>

#include "loom/crypt/key.hpp"
#include "loom/io/at_rest.hpp"
#include "loom/io/checkpoint.hpp"
#include "loom/io/checkpoint_tools.hpp"

int main(int argc, char** argv) {
  CLI::App app("loom-ckpt: inspect, verify, consolidate and export loom checkpoints");
  app.require_subcommand(1);
  std::string dir, out, key_file;
  bool verify_pieces = false;
  app.add_option("--key-file", key_file, "the key of an encrypted checkpoint (default: LOOM_KEY_FILE); what "
                 "consolidate and export write is encrypted under it");
  CLI::App* inspect = app.add_subcommand("inspect", "the layout, files, tensors and pieces of a checkpoint");
  inspect->add_option("dir", dir, "checkpoint directory")->required();
  inspect->add_flag("--verify", verify_pieces, "read every piece and check its CRC-32");
  CLI::App* verify = app.add_subcommand("verify", "check every file's size and CRC-32 and the piece tables");
  verify->add_option("dir", dir, "checkpoint directory")->required();
  CLI::App* consolidate = app.add_subcommand("consolidate", "write a loom-checkpoint-1 copy with whole tensors");
  consolidate->add_option("in", dir, "sharded checkpoint directory")->required();
  consolidate->add_option("out", out, "new directory")->required();
  CLI::App* exporter = app.add_subcommand("export", "write the weights alone as one safetensors file");
  exporter->add_option("in", dir, "checkpoint directory")->required();
  exporter->add_option("file", out, "safetensors file to write")->required();
  CLI11_PARSE(app, argc, argv);
  try {
    if (auto key = loom::crypt::SecretKey::from_flag_or_environment(key_file)) {
      loom::io::set_at_rest_key(std::make_shared<const loom::crypt::SecretKey>(std::move(*key)));
      // A tool reads what it is pointed at, plain or encrypted (refusing plain input is a run's rule).
      loom::io::set_plain_input_allowed(true);
    }
    if (inspect->parsed()) {
      std::printf("%s", loom::io::describe_checkpoint(dir, verify_pieces).c_str());
    } else if (verify->parsed()) {
      std::printf("verified: %s, step %lld\n", dir.c_str(), static_cast<long long>(loom::io::verify_checkpoint(dir)));
    } else if (consolidate->parsed()) {
      loom::io::consolidate_checkpoint(dir, out);
      std::printf("consolidated %s into %s\n", dir.c_str(), out.c_str());
    } else {
      loom::io::export_weights(dir, out);
      std::printf("exported the weights of %s to %s\n", dir.c_str(), out.c_str());
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "loom-ckpt: %s\n", error.what());
    return 1;
  }
  return 0;
}
