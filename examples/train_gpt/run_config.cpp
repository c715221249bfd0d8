#include "run_config.hpp"

#include <exception>
#include <string>

namespace train_gpt {

namespace {

// CLI11's own range checks say "Value 0 not in range 0.000000 to 1.79e308"; these name the rule.
const CLI::Validator positive([](std::string& text) -> std::string {
  try {
    std::size_t used = 0;
    const double value = std::stod(text, &used);
    if (used == text.size() && value > 0) return {};
  } catch (const std::exception&) {
  }
  return "must be a positive number, got '" + text + "'";
}, "POSITIVE");
// --batch: a whole number of sequences, or auto.
const CLI::Validator positive_count_or_auto([](std::string& text) -> std::string {
  if (text == "auto") return {};
  try {
    std::size_t used = 0;
    if (std::stoll(text, &used) > 0 && used == text.size()) return {};
  } catch (const std::exception&) {
  }
  return "must be a positive number or auto, got '" + text + "'";
}, "POSITIVE|auto");
const CLI::Validator non_negative([](std::string& text) -> std::string {
  try {
    std::size_t used = 0;
    const double value = std::stod(text, &used);
    if (used == text.size() && value >= 0) return {};
  } catch (const std::exception&) {
  }
  return "must be zero or more, got '" + text + "'";
}, "NON-NEGATIVE");

}  // namespace

void RunConfig::add_to(CLI::App& app) {
  model.vocab_size = 256;  // bytes; shards set their own with --vocab
  // The defaults learn 2-digit addition to ~100% exact match in 3000 steps (~75 s on 2 cores).
  model.context = 64;
  model.layers = 2;
  model.heads = 4;
  model.channels = 64;
  app.add_option("--layers", model.layers, "transformer blocks")->check(positive);
  app.add_option("--heads", model.heads, "attention heads")->check(positive);
  app.add_option("--channels", model.channels, "model width")->check(positive);
  app.add_option("--context", model.context, "longest sequence")->check(positive);
  app.add_option("--vocab", model.vocab_size, "vocabulary size (256 for bytes; 50257 for GPT-2 shards)")
      ->check(positive);
  app.add_option("--activation-checkpointing", activation_checkpointing, "none; selective: keep the GEMM outputs and "
                 "recompute LayerNorm, attention probabilities and GELU in backward; full: keep only each block's "
                 "input and output and recompute its forward in backward (least memory, about one more forward)")
      ->check(CLI::IsMember({"none", "selective", "full"}));
  app.add_option("--activation-checkpointing-every", recompute_every, "checkpoint every k-th block (1: all)")
      ->check(positive);
  app.add_option("--precision", precision, "fp32, tf32, fp16 or bf16")
      ->check(CLI::IsMember({"fp32", "tf32", "fp16", "bf16"}));
  app.add_option("--device", device, "cpu or cuda:N");
  app.add_option_function<std::string>("--batch", [this](const std::string& text) {
    batch_auto = text == "auto";
    if (!batch_auto) batch = std::stoll(text);
  }, "sequences per micro-batch (per rank when data-parallel), or auto: the largest that the memory model says fits "
     "(LOOM_MEMORY_LIMIT on the CPU; a probe step confirms it on the CPU under DDP or ZeRO-1), with gradient "
     "accumulation keeping --batch-per-step")
      ->check(positive_count_or_auto)->default_str("8");
  app.add_flag("--plan", plan_only, "print the memory this run needs per rank by category, the other ZeRO stages' and "
               "checkpointing modes', and on GPUs loom-plan's layouts for this machine; then exit");
  app.add_option("--batch-per-step", batch_per_step, "with --batch auto: sequences per rank per optimizer step (the "
                 "micro-batch divides it; the rest is gradient accumulation)")->check(positive);
  app.add_option("--seq-len", seq_len, "tokens per sequence (default: the context)")->check(non_negative);
  app.add_option("--grad-accum", grad_accumulation, "micro-batches per optimizer step")->check(positive);
  app.add_option("--steps", steps, "optimizer steps (in total, also when resuming)")->check(positive);
  app.add_option("--lr", lr, "peak learning rate")->check(positive);
  app.add_option("--min-lr-ratio", min_lr_ratio, "final learning rate as a fraction of --lr")->check(CLI::Range(0.0, 1.0));
  app.add_option("--warmup", warmup, "linear warmup steps")->check(non_negative);
  app.add_option("--optimizer", optimizer, "adamw or sgd (with momentum)")->check(CLI::IsMember({"adamw", "sgd"}));
  app.add_option("--weight-decay", weight_decay, "weight decay (decoupled for AdamW, L2 for SGD)")
      ->check(non_negative);
  app.add_option("--momentum", momentum, "SGD momentum")->check(CLI::Range(0.0, 1.0));
  app.add_option("--max-grad-norm", max_grad_norm, "clip gradients to this global norm (0: off)")
      ->check(non_negative);
  app.add_option("--data", data, "addition (built-in task), text:PATH (bytes of a file) or shards:GLOB[,GLOB...] "
                 "(llm.c token shards, streamed from memory maps; the last 10% of the windows held out)");
  app.add_option("--data-order", data_order, "shards: windows shuffled per epoch from --seed, or sequential")
      ->check(CLI::IsMember({"shuffled", "sequential"}));
  app.add_option("--prefetch", prefetch, "batches the background loader keeps ready")->check(CLI::Range(1, 64));
  app.add_option("--init-from", init_from, "start from these weights (fine-tuning): hf:DIR (a Hugging Face GPT-2), "
                 "llmc:FILE (an llm.c model file) or loom:PATH (a checkpoint, run directory or weights file); they "
                 "set the architecture. A run that resumes from --checkpoint-dir ignores them");
  app.add_option("--tokenizer", tokenizer, "the shards' BPE vocabulary (tokenizer.json, or a directory with it or "
                 "vocab.json + merges.txt), to read the samples with");
  app.add_option("--digits", digits, "digits per operand of the addition task")->check(CLI::Range(1, 9));
  app.add_option("--seed", seed, "seed of the initialisation and the data stream");
  app.add_option("--eval-every", eval_every, "evaluate every N steps (0: only at the end)")
      ->check(non_negative);
  app.add_option("--eval-batches", eval_batches, "held-out batches per evaluation")->check(positive);
  app.add_option("--checkpoint-dir", checkpoint_dir, "save checkpoints here");
  app.add_option("--checkpoint-every", checkpoint_every, "save every N steps (0: at the end only)")
      ->check(non_negative);
  app.add_option("--resume", resume, "auto (the default; alone, --resume means auto): continue from the newest "
                 "checkpoint in --checkpoint-dir that verifies, or start from scratch when it holds none; never: "
                 "refuse a --checkpoint-dir that holds checkpoints")
      ->expected(0, 1)
      ->check(CLI::IsMember({"", "auto", "never"}));
  app.add_option("--keep-checkpoints", keep_checkpoints, "keep the newest N checkpoints, delete older ones after a "
                 "newer one is saved")
      ->check(CLI::Range(1, 1 << 30));
  app.add_option("--keep-every", keep_every, "also keep every checkpoint whose step is a multiple of this (0: none)")
      ->check(non_negative);
  app.add_flag("--group-readable", group_readable, "checkpoints, metrics, traces and reports readable by the "
               "group (0640 files, 0750 folders) instead of the owner only (0600, 0700)");
  app.add_option("--key-file", key_file, "a loom-crypt key file (mode 0600): checkpoints are written encrypted, "
                 "encrypted checkpoints and token shards are read with it, and a TCP rendezvous admits only ranks "
                 "that hold it (as LOOM_KEY_FILE; LOOM_JOB_TOKEN, when set, authenticates the rendezvous instead)");
  app.add_flag("--allow-plain-input", allow_plain_input, "with a key: also resume from plain checkpoints and train on "
               "plain token shards (by default a run with a key refuses them, so that a plain file cannot stand in "
               "for an encrypted one)");
  app.add_option("--audit-log", audit_log, "append the run's records to this tamper-evident audit log (one JSON "
                 "line per event in a BLAKE2b hash chain, keyed with --key-file when given; check it with loom-audit "
                 "verify): start, devices, data files, checkpoints, stops, end");
  app.add_flag("--async-save", async_save, "periodic saves copy the state to host memory and write it in the "
               "background while training goes on (the last save, and one on a stop, wait for it)");
  app.add_option("--checkpoint-write-mb", checkpoint_write_mb, "each rank writes checkpoints at most this many MB/s "
                 "(0: as fast as the disk takes them), leaving the disk to the data")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--time-limit", time_limit, "stop after this many seconds of wall time as on SIGTERM: save and exit "
                 "with code 4 (0: no limit)")
      ->check(non_negative);
  app.add_option("--max-skipped-fraction", max_skipped_fraction, "stop as diverged (exit code 3) when more than this "
                 "fraction of the run's steps were skipped for non-finite gradients (judged from step 10 on)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--log-every", log_every, "print a line every N steps")->check(positive);
  app.add_option("--metrics", metrics_file, "write one JSON line per logged step here: loss, step time, tokens/s, "
                 "MFU, seconds per phase, memory by category, the ranks' straggler window, the GPU's last sample "
                 "(rank 0 writes it; every rank its own where the path holds {rank})");
  app.add_option("--straggler-every", straggler_every, "every N steps the ranks compare their time per phase and "
                 "the log names a rank whose compute phase is slow (0: off)")
      ->check(non_negative);
  app.add_option("--straggler-margin", straggler_margin, "a phase this fraction over the ranks' median is slow")
      ->check(CLI::PositiveNumber);
  app.add_option("--gpu-sample-ms", gpu_sample_ms, "read this rank's GPU through NVML (utilisation, memory, power, "
                 "clocks, temperature, throttling, PCIe and NVLink throughput) every N ms (0: off)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--report", report_file, "at the end write the right-sizing report here (markdown, and FILE.json): "
                 "every rank's phases, memory headroom and GPU utilisation, the communication share, the slowest rank, "
                 "and loom-plan's predictions for this job on fewer or more GPUs and other GPU types");
  app.add_option("--trace", trace_dir, "write a Chrome trace per rank (DIR/trace_rank<r>.json; Perfetto opens it, "
                 "scripts/merge-traces.py merges the ranks) of the steps in --trace-steps");
  app.add_option("--trace-steps", trace_steps, "the steps --trace records, FIRST-LAST (default 1-10)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            const auto dash = text.find('-');
            try {
              if (dash != std::string::npos && std::stoll(text.substr(0, dash)) >= 1 &&
                  std::stoll(text.substr(dash + 1)) >= std::stoll(text.substr(0, dash))) {
                return "";
              }
            } catch (const std::exception&) {
            }
            return "'" + text + "' is not a step range FIRST-LAST with 1 <= FIRST <= LAST";
          },
          "FIRST-LAST"));
  app.add_option("--prometheus", prometheus_file, "rewrite this file atomically at every logged step with the same "
                 "numbers in Prometheus' text format (for node_exporter's textfile collector: name it *.prom)");
  app.add_option("--grad-reduction", grad_reduction, "data-parallel gradient averaging: fp32, bf16 or fp16 (compressed)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  app.add_option("--bucket-mb", bucket_mb, "data-parallel gradient bucket size in MiB (0: the topology planner's)")
      ->check(non_negative);
  app.add_option("--zero", zero, "ZeRO stage when data-parallel: 0 (DDP), 1 (optimizer state sharded), 2 (and "
                 "gradients) or 3 (and parameters, gathered unit by unit as they are used)")
      ->check(CLI::Range(0, 3));
  app.add_option("--keep-gathered", keep_gathered, "ZeRO-3: release a unit's gathered values after each use (none), "
                 "keep them from forward to backward (backward), or across the step's micro-batches too (step)")
      ->check(CLI::IsMember({"none", "backward", "step"}));
  app.add_option("--tp", tensor_parallel, "tensor parallelism: split every layer over groups of this many ranks "
                 "(consecutive ranks, one host); the data-parallel degree is the ranks / this")
      ->check(CLI::PositiveNumber);
  app.add_flag("--tp-across-hosts", tensor_across_hosts, "allow a tensor group to span hosts (otherwise refused)");
  app.add_option("--algo", algo, "data-parallel collectives: flat, hier (inside hosts, then across) or auto (planner)")
      ->check(CLI::IsMember({"flat", "hier", "auto"}));
}

loom::train::TrainerOptions RunConfig::trainer_options() const {
  loom::train::TrainerOptions o;
  o.grad_accumulation = grad_accumulation;
  o.max_grad_norm = max_grad_norm;
  o.schedule = {.max_lr = lr, .min_lr = lr * min_lr_ratio, .warmup = std::min(warmup, steps), .total = steps};
  o.optimizer = optimizer == "sgd" ? loom::train::TrainerOptions::OptimizerKind::sgd
                                   : loom::train::TrainerOptions::OptimizerKind::adamw;
  o.adamw.weight_decay = weight_decay;
  o.sgd.momentum = momentum;
  o.sgd.weight_decay = weight_decay;
  o.data_seed = seed;
  o.zero = zero;
  o.checkpoint.max_write_bytes_per_second = checkpoint_write_mb * 1e6;
  o.zero_options.keep_gathered_for_backward = keep_gathered != "none";
  o.zero_options.keep_gathered_across_micro_batches = keep_gathered == "step";
  // ZeRO-2/3 reduce-scatter in bf16 (fp32 accumulation into the shard); DDP compresses with a hook.
  if (zero >= 2 && grad_reduction == "bf16") o.zero_options.reduction = loom::DType::bf16;
  o.stragglers.every = straggler_every;
  if (!trace_dir.empty()) {
    const auto dash = trace_steps.find('-');
    o.trace = {.dir = trace_dir, .first_step = std::stoll(trace_steps.substr(0, dash)),
               .last_step = std::stoll(trace_steps.substr(dash + 1))};
  }
  o.stragglers.margin = straggler_margin;
  return o;
}

}  // namespace train_gpt
