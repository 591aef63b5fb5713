#!/usr/bin/env bash
# cleave-datagen end to end: file sizes of the real formats, determinism per seed, bad arguments.
# Usage: datagen_cli_test.sh PATH_TO_cleave-datagen
set -u
tool=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "datagen_cli_test: $*" >&2; exit 1; }

"$tool" mnist --out "$tmp/a" --train 120 --test 30 --seed 3 >/dev/null || fail "mnist run failed"
"$tool" mnist --out "$tmp/b" --train 120 --test 30 --seed 3 >/dev/null || fail "mnist rerun failed"
"$tool" mnist --out "$tmp/c" --train 120 --test 30 --seed 4 >/dev/null || fail "mnist seed 4 failed"
size() { stat -c %s "$1"; }
[ "$(size "$tmp/a/MNIST_Data/train/train-images-idx3-ubyte")" -eq $((16 + 120 * 784)) ] ||
  fail "train images size"
[ "$(size "$tmp/a/MNIST_Data/train/train-labels-idx1-ubyte")" -eq $((8 + 120)) ] || fail "labels size"
[ "$(size "$tmp/a/MNIST_Data/test/t10k-images-idx3-ubyte")" -eq $((16 + 30 * 784)) ] ||
  fail "test images size"
cmp -s "$tmp/a/MNIST_Data/train/train-images-idx3-ubyte" "$tmp/b/MNIST_Data/train/train-images-idx3-ubyte" ||
  fail "the same seed wrote different images"
cmp -s "$tmp/a/MNIST_Data/train/train-images-idx3-ubyte" "$tmp/c/MNIST_Data/train/train-images-idx3-ubyte" &&
  fail "seeds 3 and 4 wrote the same images"
# The IDX magic numbers, big-endian.
[ "$(head -c 4 "$tmp/a/MNIST_Data/train/train-images-idx3-ubyte" | od -An -tx1 | tr -d ' ')" = 00000803 ] ||
  fail "image magic"

"$tool" cifar10 --out "$tmp/d" --train 10 --test 3 >/dev/null || fail "cifar10 run failed"
for k in 1 2 3 4 5; do
  [ "$(size "$tmp/d/cifar-10-batches-bin/data_batch_$k.bin")" -eq $((2 * 3073)) ] || fail "batch $k size"
done
[ "$(size "$tmp/d/cifar-10-batches-bin/test_batch.bin")" -eq $((3 * 3073)) ] || fail "test batch size"

"$tool" mnist --train 5 >/dev/null 2>&1 && fail "a missing --out was accepted"
"$tool" imagenet --out "$tmp/e" >/dev/null 2>&1 && fail "an unknown data set was accepted"
"$tool" mnist --out "$tmp/e" --train -5 >/dev/null 2>&1 && fail "a negative count was accepted"
touch "$tmp/file"
err=$("$tool" mnist --out "$tmp/file" --train 1 --test 1 2>&1 >/dev/null) && fail "a file as --out was accepted"
grep -q "cannot create folder" <<<"$err" || fail "unclear error for a file as --out: $err"
echo "datagen_cli_test: ok"
