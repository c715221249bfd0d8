#!/usr/bin/env bash
# loom-crypt as a user runs it: keygen's key id equals Python's hashlib BLAKE2b keyed with the key
# (the independent reference for the id), a folder encrypts and decrypts back to the same bytes
# (diff -r), every output is owner-only, inspect verifies every chunk, rekey moves the files to a
# new key (the old one is then named as another key), a damaged file and a key file with mode 0644
# are refused by name.
set -euo pipefail
crypt=$1
dir=$2
rm -rf "$dir" && mkdir -p "$dir/plain/sub" && cd "$dir"
fail() { echo "FAIL: $*" >&2; exit 1; }

"$crypt" keygen k > keygen.txt
id=$(sed -n 's/.*key id \([0-9a-f]*\)$/\1/p' keygen.txt)
[ "$(stat -c %a k)" = 600 ] || fail "key file mode $(stat -c %a k)"
reference=$(/usr/bin/python3 -c "
import hashlib, sys
key = bytes.fromhex(open('k').read().split()[1])
print(hashlib.blake2b(b'loom key id 1', key=key, digest_size=16).hexdigest())")
[ "$id" = "$reference" ] || fail "key id $id, Python's BLAKE2b says $reference"
if "$crypt" keygen k 2> err.txt; then fail "keygen overwrote a key"; fi
grep -q "a key is never overwritten" err.txt || fail "keygen over a key: $(cat err.txt)"

head -c 3000000 /dev/urandom > plain/big.bin
: > plain/empty.bin
printf 'tokens' > plain/sub/small.txt
"$crypt" encrypt --key-file k --chunk-kb 64 plain enc > /dev/null
[ "$(stat -c %a enc)" = 700 ] && [ "$(stat -c %a enc/sub)" = 700 ] || fail "folder modes"
[ "$(stat -c %a enc/big.bin)" = 600 ] || fail "file mode $(stat -c %a enc/big.bin)"
cmp -s plain/big.bin enc/big.bin && fail "the encrypted file is the plain one"
"$crypt" inspect --key-file k enc > inspect.txt
[ "$(grep -c 'verified$' inspect.txt)" = 3 ] || fail "inspect: $(cat inspect.txt)"
grep -q "big.bin: loom encrypted v1, key id $id, 3000000 bytes in 46 chunk(s) of 64 KiB" inspect.txt ||
  fail "inspect: $(cat inspect.txt)"
LOOM_KEY_FILE=k "$crypt" decrypt enc back > /dev/null
diff -r plain back || fail "decrypted folder differs"

"$crypt" keygen k2 > /dev/null
"$crypt" rekey --key-file k --new-key-file k2 enc > /dev/null
if "$crypt" decrypt --key-file k enc/big.bin again.bin 2> err.txt; then fail "the old key still decrypts"; fi
grep -q "was encrypted with another key (key id" err.txt || fail "old key: $(cat err.txt)"
"$crypt" decrypt --key-file k2 enc/big.bin again.bin > /dev/null
cmp plain/big.bin again.bin || fail "rekeyed file decrypts differently"

/usr/bin/python3 -c "
f = open('enc/big.bin', 'r+b'); f.seek(80 + 3 * (65536 + 17) + 7); b = f.read(1); f.seek(-1, 1); f.write(bytes([b[0] ^ 1]))"
if "$crypt" inspect --key-file k2 enc/big.bin > damaged.txt; then fail "inspect passed a damaged file"; fi
grep -q "chunk 3 fails authentication" damaged.txt || fail "damaged: $(cat damaged.txt)"
if "$crypt" decrypt --key-file k2 enc/big.bin again.bin 2> err.txt; then fail "decrypted a damaged file"; fi
cmp -s plain/big.bin again.bin || fail "a failed decryption changed the earlier output"

chmod 644 k2
if "$crypt" inspect --key-file k2 enc 2> err.txt > /dev/null; then fail "a 0644 key file was used"; fi
grep -q "has mode 0644" err.txt || fail "0644 key: $(cat err.txt)"
echo "loom-crypt: key id, folder round trip, modes, inspect, rekey, damage and key-file mode checked"
