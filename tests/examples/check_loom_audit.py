#!/usr/bin/env python3
"""train_gpt --audit-log and loom-audit as an operator uses them (issue 32).

Two runs of train_gpt (the second resumes) append to one keyed audit log; loom-audit verify
passes on it with the key and names the key without it; the data files' and checkpoints'
digests in the log are Python hashlib's BLAKE2b-256 of the files; each record hash is BLAKE2b of
the line before its hash member, keyed with libsodium's KDF subkey (checked here on the unkeyed
log: hashlib has no KDF); and loom-audit names the record for an edited, a deleted and a
reordered line, and for an edit whose hash was recomputed in an unkeyed log; a run stopped by its
time limit records the stop and its exit code; a run started --init-from records its source and
the digests of its files.

usage: check_loom_audit.py TRAIN_GPT LOOM_AUDIT LOOM_CRYPT WORK_DIR
"""
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys

train_gpt, loom_audit, loom_crypt, work = (os.path.abspath(a) for a in sys.argv[1:5])
here = os.path.dirname(os.path.abspath(__file__))
shutil.rmtree(work, ignore_errors=True)
os.makedirs(os.path.join(work, "shards"))
os.chdir(work)
env = dict(os.environ, OMP_NUM_THREADS="1")
env.pop("LOOM_KEY_FILE", None)
failures = 0


def check(ok, what):
    global failures
    print(("ok: " if ok else "FAIL: ") + what)
    failures += 0 if ok else 1


def run(*args):
    return subprocess.run(list(args), capture_output=True, text=True, errors="replace", env=env)


text = b"".join(open(os.path.join(here, "..", "..", p), "rb").read() for p in ("README.md", "SECURITY.md"))
cut = len(text) // 2
for i, part in enumerate((text[:cut], text[cut:])):
    with open(f"shards/train_{i}.bin", "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(part), *([0] * 253)))
        f.write(struct.pack(f"<{len(part)}H", *part))
run(loom_crypt, "keygen", "key").check_returncode()

common = ["--data", "shards:shards/train_*.bin", "--log-every", "10", "--eval-every", "0", "--batch", "4",
          "--checkpoint-dir", "run", "--checkpoint-every", "10", "--audit-log", "audit.jsonl", "--key-file", "key",
          "--allow-plain-input"]  # plain shards with a key: each is recorded as plain
first = run(train_gpt, "--steps", "20", *common)
second = run(train_gpt, "--steps", "30", *common)
check(first.returncode == 0 and second.returncode == 0,
      f"two runs append to one audit log (exit {first.returncode}, {second.returncode}) {second.stderr[-300:]}")
verified = run(loom_audit, "verify", "audit.jsonl", "--key-file", "key")
check(verified.returncode == 0 and "2 runs, chain intact (keyed" in verified.stdout,
      f"loom-audit verify passes on the real log: {verified.stdout.strip()}")
without = run(loom_audit, "verify", "audit.jsonl")
check(without.returncode == 1 and "key: line 1 (seq 0)" in without.stdout,
      f"without the key it says so: {without.stdout.strip()}")
check(oct(os.stat("audit.jsonl").st_mode & 0o777) == "0o600", "the audit log is owner-only (0600)")

records = [json.loads(line) for line in open("audit.jsonl")]
events = [r["event"] for r in records]
check(events.count("run_start") == 2 and events[-1] == "run_end" and "checkpoint_loaded" in events and
      events.count("data_open") == 4 and events.count("checkpoint_written") == 3,
      f"the records: {', '.join(events)}")


def blake2b_file(path):
    h = hashlib.blake2b(digest_size=32)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


data = [r for r in records if r["event"] == "data_open"]
check(len(data) == 4 and all(r["blake2b"] == blake2b_file(r["path"]) and r["bytes"] == os.path.getsize(r["path"])
                             and r["encrypted"] is False for r in data),
      f"data_open digests and sizes are hashlib's BLAKE2b-256 and the files' ({len(data)} records)")
last = [r for r in records if r["event"] == "checkpoint_written"][-1]
check(all(digest == blake2b_file(os.path.join(last["path"], name)) for name, digest in last["files"].items())
      and len(last["files"]) == 2, f"checkpoint_written digests are hashlib's for {sorted(last['files'])}")
start = records[0]
check(start["keyed"] is True and start["configuration_digest"] ==
      hashlib.blake2b(start["configuration"].encode(), digest_size=32).hexdigest() and "--audit-log" in start["command_line"],
      "run_start: keyed, the configuration digest is BLAKE2b of the configuration, the command line")

# A stop (the time limit, as SIGTERM would): its record, what was saved, and the run's end.
stopped = run(train_gpt, "--steps", "100000", "--time-limit", "1", *common)
after = [json.loads(line) for line in open("audit.jsonl")][len(records):]
stop = [r for r in after if r["event"] == "stop"]
check(stopped.returncode == 4 and len(stop) == 1 and stop[0]["reason"] == "the time limit" and
      stop[0]["saved"].endswith("step_%08d" % after[-1]["steps"]) and after[-1]["event"] == "run_end" and
      after[-1]["exit_code"] == 4 and run(loom_audit, "verify", "audit.jsonl", "--key-file", "key").returncode == 0,
      f"a stopped run records the stop, what it saved and its exit code 4: {[r['event'] for r in after]}")

# --init-from: its source and each of its files' digests, as hashlib reads them.
source = stop[0]["saved"] if stop else "missing"
init = run(train_gpt, "--steps", "10", "--log-every", "10", "--eval-every", "0", "--batch", "4", "--data",
           "shards:shards/train_*.bin", "--init-from", "loom:" + source, "--audit-log", "init.jsonl",
           "--key-file", "key", "--allow-plain-input")
loaded = [json.loads(line) for line in open("init.jsonl")] if os.path.exists("init.jsonl") else []
loaded = [r for r in loaded if r["event"] == "weights_loaded"]
check(init.returncode == 0 and len(loaded) == 1 and loaded[0]["source"] == "loom:" + source and
      loaded[0]["files"] == {name: blake2b_file(os.path.join(source, name)) for name in os.listdir(source)},
      f"--init-from is recorded with its files' digests: {loaded[0]['files'] if loaded else init.stderr[-300:]}")

lines = open("audit.jsonl").read().splitlines()


def tampered(name, new_lines, key, expect, code=1):
    with open(name, "w") as f:
        f.write("".join(line + "\n" for line in new_lines))
    args = [loom_audit, "verify", name] + (["--key-file", "key"] if key else [])
    out = run(*args)
    check(out.returncode == code and expect in out.stdout, f"{name}: {out.stdout.strip()}")


edited = list(lines)
edited[4] = edited[4].replace('"rank":0', '"rank":1', 1)
tampered("edited.jsonl", edited, True, "edited: line 5 (seq 4)")
tampered("deleted.jsonl", lines[:3] + lines[4:], True, "removed: line 4 (seq 4): seq 3 removed")
tampered("reordered.jsonl", lines[:2] + [lines[3], lines[2]] + lines[4:], True,
         "reordered: line 3 (seq 3): seq 2 should come here but is at line 4")

# An unkeyed log: its hashes are hashlib's BLAKE2b of the bytes before the hash member, and an edit
# whose hash is recomputed is caught by the next record's prev.
env_plain = run(train_gpt, "--steps", "10", "--log-every", "10", "--eval-every", "0", "--batch", "4", "--data",
                "shards:shards/train_*.bin", "--audit-log", "plain.jsonl")
plain = open("plain.jsonl").read().splitlines()
check(env_plain.returncode == 0 and all(
    json.loads(line)["hash"] == hashlib.blake2b(line[:line.rindex(',"hash":"')].encode(), digest_size=32).hexdigest()
    for line in plain), f"an unkeyed log's hashes are hashlib's BLAKE2b-256 ({len(plain)} records)")
forged = list(plain)
body = forged[1][:forged[1].rindex(',"hash":"')].replace('"local_rank":0', '"local_rank":7')
forged[1] = body + ',"hash":"' + hashlib.blake2b(body.encode(), digest_size=32).hexdigest() + '"}'
tampered("forged.jsonl", forged, False, "edited: line 3 (seq 2): its prev is not the hash of line 2 (seq 1)")
sys.exit(1 if failures else 0)
