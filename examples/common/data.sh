# Sourced by the examples' run scripts (with $root and $bin set): sets DATA_PATH, generating MNIST
# with cleave-datagen into $CLEAVE_DATA_DIR (default: datasets/ at the repository root) on the
# first run when unset. CLEAVE_DATASET=cifar10 does the same for CIFAR-10
# (DATA_PATH=.../cifar-10-batches-bin). A relative DATA_PATH or CLEAVE_DATA_DIR is taken from the
# current folder and made absolute, since the scripts start their programs from another folder.
if [ -z "${DATA_PATH:-}" ]; then
  case "${CLEAVE_DATASET:-mnist}" in
    cifar10) data_kind=cifar10 data_folder=cifar-10-batches-bin ;;
    *) data_kind=mnist data_folder=MNIST_Data ;;
  esac
  data_root=${CLEAVE_DATA_DIR:-$root/datasets}
  if [ ! -d "$data_root/$data_folder" ]; then
    # Written to a temporary folder and moved into place, so an interrupted run leaves no half
    # data set behind.
    mkdir -p "$data_root"
    tmp=$(mktemp -d "$data_root/.$data_kind.XXXXXX")
    "$bin/cleave-datagen" "$data_kind" --out "$tmp"
    mv "$tmp/$data_folder" "$data_root/$data_folder"
    rmdir "$tmp"
  fi
  export DATA_PATH=$data_root/$data_folder
fi
case "$DATA_PATH" in
  /*) ;;
  *) DATA_PATH=$PWD/$DATA_PATH ;;
esac
export DATA_PATH
