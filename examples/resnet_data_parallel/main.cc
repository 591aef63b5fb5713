// Seed 001: ResNet-50 on CIFAR-10 in DATA_PARALLEL mode, written as the seed's
// resnet50_distributed_training.py. Every process reads its shard of the data set
// (num_shards = get_group_size(), shard_id = get_rank()), the compiled training step all-reduces
// the gradients in buckets that overlap the backward pass and averages them (mirror_mean), and
// parameter_broadcast starts every rank from rank 0's weights, so all ranks hold the same
// parameters after every step. The seed's AUTO_PARALLEL variant (--parallel-mode auto) has the
// dynamic-programming search choose every operator's strategy from the cost model
// (cleave/parallel/search.h); its ranks start from the same seed, since a sharded parameter is
// sliced from each rank's own initial value (the seed sets no parameter_broadcast there).
//
// Started by run.sh (the seed's script: a device<i> folder per rank, RANK_ID, DEVICE_ID and a rank
// table), under cleave-run, mpirun, or alone (one process). DATA_PATH or --data-path names the
// cifar-10-batches-bin folder; the run scripts generate one with cleave-datagen when unset.
//
// At the end each rank prints a fingerprint of its parameters ("rank R of N: parameters
// fnv1a64 <hex>, sum <sum>"): equal on every rank of a data-parallel job.
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "cleave/cleave.h"
#include "cleave/flags.h"
#include "cleave/runtime/sharded_parameters.h"
#include "common/resnet.h"

namespace {

using namespace cleave;
namespace ds = cleave::dataset;
namespace vision = cleave::dataset::vision;
namespace C = cleave::dataset::transforms;

struct Options {
  std::string data_path;
  int64_t epoch_size = 10;
  int64_t batch_size = 32;
  int64_t image_size = 224;  // the seed's Resize; 32 keeps CIFAR-10's own size
  int64_t num_samples = 0;   // 0: the whole shard
  std::string network = "resnet50";
  std::string parallel_mode = "data";
  std::string search_mode = "dynamic_programming";  // of --parallel-mode auto
  bool parameter_broadcast = true;
  double bucket_cap_mb = 25;
  bool parallel_optimizer = false;            // enable_parallel_optimizer
  int64_t parallel_optimizer_threshold = 64;  // KB, MindSpore's default
  uint64_t seed = 1;
};

ds::DatasetPtr create_dataset(const Options& o, int64_t repeat_num, int rank_id, int rank_size) {
  const double rescale = 1.0 / 255.0;
  const double shift = 0.0;

  ds::Cifar10Options source;
  source.num_shards = rank_size;
  source.shard_id = rank_id;
  source.usage = "train";
  if (o.num_samples > 0) source.num_samples = o.num_samples;
  ds::DatasetPtr data_set = ds::Cifar10Dataset(o.data_path, source);

  // define map operations
  vision::RandomCrop random_crop_op({32, 32}, {4, 4, 4, 4});
  vision::RandomHorizontalFlip random_horizontal_op;
  vision::Resize resize_op({o.image_size, o.image_size});
  vision::Rescale rescale_op(rescale, shift);
  vision::Normalize normalize_op({0.4465, 0.4822, 0.4914}, {0.2010, 0.1994, 0.2023});
  vision::HWC2CHW changeswap_op;
  C::TypeCast type_cast_op(DType::kInt32);

  // apply map operations on images
  data_set = data_set->map({type_cast_op}, {"label"});
  data_set = data_set->map({random_crop_op}, {"image"});
  data_set = data_set->map({random_horizontal_op}, {"image"});
  if (o.image_size != 32) data_set = data_set->map({resize_op}, {"image"});
  data_set = data_set->map({rescale_op}, {"image"});
  data_set = data_set->map({normalize_op}, {"image"});
  data_set = data_set->map({changeswap_op}, {"image"});

  // apply shuffle operations
  data_set = data_set->shuffle(10);
  // apply batch operations
  data_set = data_set->batch(o.batch_size, /*drop_remainder=*/true);
  // apply repeat operations
  data_set = data_set->repeat(repeat_num);
  return data_set;
}

// FNV-1a over the bytes of every trainable parameter, and their sum.
// Of the whole parameters: a rank holding slices (the parallel optimizer) gathers them first, so
// this is collective.
std::pair<uint64_t, double> fingerprint(const nn::Cell& net) {
  uint64_t h = 1469598103934665603ull;
  double sum = 0;
  for (const Tensor& slice : net.trainable_params()) {
    const Tensor p = runtime::gather_parameter(slice);
    const auto* bytes = static_cast<const unsigned char*>(p.raw_data());
    for (size_t i = 0; i < p.nbytes(); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
    for (float v : p.to_vector<float>()) sum += v;
  }
  return {h, sum};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Seed 001: ResNet-50 on CIFAR-10, data or auto parallel across processes."};
  std::vector<cleave::flags::Variable> variables = {
      {"DATA_PATH", "the cifar-10-batches-bin folder (--data-path)"},
      {"RANK_TABLE_FILE", "a rank table (seed 001's MINDSPORE_HCCL_CONFIG_PATH too), with RANK_ID"},
      {"CLEAVE_RANK_TABLE_PORT", "rank tables: the port rank 0 serves the rendezvous on"}};
  for (const auto& v : cleave::flags::cluster_variables()) variables.push_back(v);
  cleave::flags::setup(app, variables);
  Options o;
  if (const char* env = std::getenv("DATA_PATH")) o.data_path = env;
  app.add_option("--data-path", o.data_path, "cifar-10-batches-bin folder (default: $DATA_PATH)");
  app.add_option("--epoch-size", o.epoch_size, "epochs to train (the seed's epoch_size)")
      ->check(cleave::flags::positive());
  app.add_option("--batch-size", o.batch_size, "images per step on each rank")
      ->check(cleave::flags::positive());
  app.add_option("--image-size", o.image_size,
                 "the side images are resized to (the seed's 224; 32 skips the resize, about "
                 "50x less work per step)")
      ->check(cleave::flags::integer_in(32, 1024));
  app.add_option("--num-samples", o.num_samples,
                 "read only this many images of this rank's shard (0: all)")
      ->check(cleave::flags::non_negative());
  app.add_option("--network", o.network, "resnet50 (the seed's) or resnet_small")
      ->check(cleave::flags::one_of({"resnet50", "resnet_small"}));
  app.add_option("--parallel-mode", o.parallel_mode,
                 "data (DATA_PARALLEL, the seed's first variant) or auto (AUTO_PARALLEL: the "
                 "dynamic-programming strategy search, every rank from the same seed)")
      ->check(cleave::flags::one_of({"data", "auto"}));
  app.add_option("--search-mode", o.search_mode,
                 "the AUTO_PARALLEL search: dynamic_programming (the optimum of the cost model, "
                 "MindSpore's default) or recursive_programming (SAPP, a fast heuristic)")
      ->check(cleave::flags::one_of({"dynamic_programming", "recursive_programming"}));
  app.add_option("--parameter-broadcast", o.parameter_broadcast,
                 "broadcast rank 0's initial parameters (true, MindSpore's default in data "
                 "parallel mode, or false)")
      ->check(cleave::flags::one_of({"true", "false"}));
  app.add_option("--bucket-cap-mb", o.bucket_cap_mb,
                 "gradients are all-reduced in buckets of at most this many MiB (0: one "
                 "AllReduce per gradient)")
      ->check(cleave::flags::non_negative_number());
  app.add_option("--enable-parallel-optimizer", o.parallel_optimizer,
                 "split each parameter of at least --parallel-optimizer-threshold KB, its "
                 "gradient and its optimizer state over the ranks (true or false, the default)")
      ->check(cleave::flags::one_of({"true", "false"}));
  app.add_option("--parallel-optimizer-threshold", o.parallel_optimizer_threshold,
                 "KB: smaller parameters stay replicated (MindSpore's default, 64)")
      ->check(cleave::flags::non_negative_number());
  app.add_option("--seed", o.seed,
                 "seed of the weights and the data augmentation (in data parallel mode each rank "
                 "adds its rank to it, so that parameter_broadcast has something to do)");
  if (auto status = cleave::flags::parse(app, argc, argv)) return *status;
  if (o.data_path.empty()) {
    std::fprintf(stderr,
                 "resnet_data_parallel: no data: set DATA_PATH or --data-path to a "
                 "cifar-10-batches-bin folder (cleave-datagen cifar10 --out DIR writes one)\n");
    return 2;
  }

  try {
    runtime::set_context({.mode = runtime::GRAPH_MODE});
    init();
    const int rank_id = get_rank();
    const int rank_size = get_group_size();
    const bool auto_parallel = o.parallel_mode == "auto";
    set_seed(o.seed + (auto_parallel ? 0 : static_cast<uint64_t>(rank_id)));

    const int64_t num_classes = 10;
    runtime::AutoParallelContext parallel;
    if (rank_size > 1) {
      parallel.parallel_mode = auto_parallel ? runtime::AUTO_PARALLEL : runtime::DATA_PARALLEL;
      parallel.search_mode = o.search_mode;
      parallel.mirror_mean = true;
      parallel.parameter_broadcast = !auto_parallel && o.parameter_broadcast;
      parallel.bucket_cap_mb = o.bucket_cap_mb;
      parallel.enable_parallel_optimizer = o.parallel_optimizer;
      parallel.parallel_optimizer_config.parallel_optimizer_threshold =
          o.parallel_optimizer_threshold;
      runtime::set_auto_parallel_context(parallel);
    }
    auto loss_cb = std::make_shared<train::LossMonitor>();
    // The seed repeats the data set epoch_size times and trains epoch_size epochs: in MindSpore
    // 0.2 the repeat count was the number of passes. cleave's Model.train reads the data set
    // once per epoch, so the same passes are a repeat of 1.
    ds::DatasetPtr dataset = create_dataset(o, /*repeat_num=*/1, rank_id, rank_size);
    std::shared_ptr<examples::ResNet> net = o.network == "resnet50"
                                                ? examples::resnet50(o.batch_size, num_classes)
                                                : examples::resnet_small(num_classes);
    auto loss = std::make_shared<examples::SoftmaxCrossEntropyExpand>(/*sparse=*/true);
    auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), 0.01, 0.9);
    train::Model model(net, loss, opt);
    model.train(o.epoch_size, dataset, {loss_cb}, /*dataset_sink_mode=*/false);

    const auto [hash, sum] = fingerprint(*net);
    fmt::print("rank {} of {}: parameters fnv1a64 {:016x}, sum {:.9e}\n", rank_id, rank_size, hash,
               sum);
    std::fflush(stdout);
    release();
  } catch (const Error& e) {
    std::fprintf(stderr, "resnet_data_parallel: %s\n", e.what());
    std::fflush(stderr);
    report_failure(e.what());  // the whole job stops at once with this error
    return 1;
  }
  return 0;
}
