// train_gpt's command line: what to train, on what, how, and where to keep checkpoints.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "loom/nn/gpt.hpp"
#include "loom/train/trainer.hpp"

namespace train_gpt {

struct RunConfig {
  loom::nn::GPTConfig model{};
  std::string precision = "fp32";
  std::string activation_checkpointing = "none";  // none | full (recompute each block's forward in backward)
  std::int64_t recompute_every = 1;               // ... for every k-th block
  std::string device = "cpu";
  std::int64_t batch = 8;
  bool batch_auto = false;              // --batch auto: the largest micro-batch that fits (batch_auto.hpp)
  std::int64_t batch_per_step = 64;     // ... dividing this many sequences per rank per step
  bool plan_only = false;               // --plan: print what the run would need (run_plan.hpp) and exit
  std::int64_t seq_len = 0;  // 0: the model's context
  std::int64_t grad_accumulation = 1;
  std::int64_t steps = 3000;
  float lr = 3e-3f;
  float min_lr_ratio = 0.1f;
  std::int64_t warmup = 100;
  float weight_decay = 0.1f;
  std::string optimizer = "adamw";
  float momentum = 0.9f;
  float max_grad_norm = 1.0f;
  std::string data = "addition";  // addition | text:PATH | shards:PATH-OR-GLOB[,...]
  std::string data_order = "shuffled";  // shards: windows shuffled per epoch, or sequential
  int prefetch = 2;                     // batches the loader keeps ready
  std::string tokenizer;                // a GPT-2 BPE vocabulary to read samples with
  std::string init_from;                // hf:DIR | llmc:FILE | loom:PATH: the weights a new run starts from
  std::vector<std::string> architecture_flags;  // --layers, --vocab, ... as given (--init-from checks them)
  int digits = 2;
  std::uint64_t seed = 1;
  std::int64_t eval_every = 500;
  std::int64_t eval_batches = 4;
  std::string checkpoint_dir;
  std::int64_t checkpoint_every = 0;  // 0: only at the end (when a directory is given)
  std::string resume = "auto";        // auto: from the newest checkpoint that verifies, if any; never
  int keep_checkpoints = 3;           // the newest N checkpoints are kept, older ones deleted
  std::int64_t keep_every = 0;        // and every checkpoint whose step is a multiple of this (0: none)
  bool async_save = false;            // the periodic saves write in the background while training goes on
  bool group_readable = false;        // what the run writes is 0640/0750 instead of owner-only
  std::string key_file;               // encryption at rest (else LOOM_KEY_FILE; neither: plain files)
  bool allow_plain_input = false;     // with a key, plain checkpoints and shards are read too
  std::string audit_log;              // the tamper-evident audit log to append to (empty: none)
  double checkpoint_write_mb = 0;     // MB/s each rank writes at most (0: no limit)
  double time_limit = 0;              // seconds of wall time, then stop as on SIGTERM (0: none)
  double max_skipped_fraction = 0.1;  // more skipped (non-finite) steps than this: the run diverged
  std::int64_t log_every = 1;
  std::string metrics_file;     // one JSON line per logged step (rank 0's)
  std::string prometheus_file;  // Prometheus text, rewritten atomically at every logged step
  std::int64_t straggler_every = 50;  // steps per straggler window (0: off)
  int gpu_sample_ms = 1000;           // NVML sampling interval (0: off)
  std::string report_file;            // the right-sizing report (markdown; .json beside it)
  std::string trace_dir;              // a Chrome trace per rank of the steps in trace_steps
  std::string trace_steps = "1-10";   // FIRST-LAST, both included
  double straggler_margin = 0.2;      // a phase this fraction over the ranks' median is slow
  std::string grad_reduction = "fp32";  // data-parallel gradient averaging: fp32, or compressed to bf16/fp16
  double bucket_mb = 25;                // gradient bucket size; 0: the topology planner's recommendation
  std::string algo = "auto";            // gradient all-reduce: flat, hier, or auto (the planner's choice)
  int zero = 0;                         // 0: DDP; 1: optimizer state sharded; 2: gradients too; 3: parameters too
  int tensor_parallel = 1;              // ranks per tensor group (the layers split over them); data = world / this
  bool tensor_across_hosts = false;     // allow a tensor group to span hosts (slow: every layer all-reduces)
  std::string keep_gathered = "none";   // ZeRO-3: none, backward, step

  void add_to(CLI::App& app);
  loom::train::TrainerOptions trainer_options() const;
};

}  // namespace train_gpt
