# Sourced by the examples' run scripts (with $root and $bin set): sets DATA_PATH, generating MNIST
# with cleave-datagen into $CLEAVE_DATA_DIR (default: datasets/ at the repository root) on the
# first run when unset. CLEAVE_DATASET=cifar10 does the same for CIFAR-10
# (DATA_PATH=.../cifar-10-batches-bin).
if [ -z "${DATA_PATH:-}" ] && [ "${CLEAVE_DATASET:-mnist}" = cifar10 ]; then
  data_root=${CLEAVE_DATA_DIR:-$root/datasets}
  if [ ! -d "$data_root/cifar-10-batches-bin" ]; then
    mkdir -p "$data_root"
    tmp=$(mktemp -d "$data_root/.cifar10.XXXXXX")
    "$bin/cleave-datagen" cifar10 --out "$tmp"
    mv "$tmp/cifar-10-batches-bin" "$data_root/cifar-10-batches-bin"
    rmdir "$tmp"
  fi
  export DATA_PATH=$data_root/cifar-10-batches-bin
fi
if [ -z "${DATA_PATH:-}" ]; then
  data_root=${CLEAVE_DATA_DIR:-$root/datasets}
  if [ ! -d "$data_root/MNIST_Data" ]; then
    # Written to a temporary folder and moved into place, so an interrupted run leaves no half
    # data set behind.
    mkdir -p "$data_root"
    tmp=$(mktemp -d "$data_root/.mnist.XXXXXX")
    "$bin/cleave-datagen" mnist --out "$tmp"
    mv "$tmp/MNIST_Data" "$data_root/MNIST_Data"
    rmdir "$tmp"
  fi
  export DATA_PATH=$data_root/MNIST_Data
fi
