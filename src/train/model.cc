// Model: the training loop, evaluation and prediction.
#include "cleave/train/model.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <atomic>
#include <cstdio>

#include "cleave/autodiff/backward.h"
#include "cleave/comm/group_registry.h"
#include "cleave/core/error.h"
#include "cleave/nn/loss.h"
#include "cleave/runtime/context.h"
#include "cleave/train/checkpoint.h"
#include "cleave/train/sharded_checkpoint.h"

namespace cleave::train {
namespace {

// The (data, label) of a row; throws Error naming the columns when the row has another arity.
void check_row(const char* what, const dataset::Dataset& ds, const dataset::Row& row) {
  if (row.size() == 2) return;
  std::string names;
  for (const std::string& name : ds.column_names()) names += (names.empty() ? "" : ", ") + name;
  CLEAVE_FAIL(
      "Model.{}: the dataset's rows have {} columns ({}); expected 2: the network's input and the "
      "label",
      what, row.size(), names);
}

// NOTE [Placed workers meet every epoch]
// In a placed job a worker that owns no op of the step (seed 000's workers 5, 6 and 7) runs its
// steps in microseconds, while the workers that own the network train for the whole epoch. Left
// alone, it ran ahead through every epoch to the first collective after training and waited
// there for the others' whole training, which is bounded by CLEAVE_COMM_TIMEOUT_MS (300 s): the
// job failed ("rank(s) 0, 1, 2, 3, 4 did not arrive within the timeout ... they are alive") as
// soon as training lasted longer, e.g. seed 000 on the full MNIST for more epochs, or at the
// test's size in a sanitizer build. So every worker of a placed job passes a barrier of the world
// group after each epoch: a worker waits at most one epoch of the others' training. (An epoch
// longer than the timeout still needs a larger CLEAVE_COMM_TIMEOUT_MS.)
void meet_after_placed_epoch(const TrainStep& step) {
  if (!step.placed()) return;
  const std::shared_ptr<comm::ProcessGroup> world = comm::get_group(comm::kWorldGroup);
  if (world != nullptr && world->size() > 1) world->barrier();
}

// NOTE [Metrics over ranks]
// In a DATA_PARALLEL job each rank evaluates its own shard of the evaluation set (num_shards /
// shard_id, as it trains on its shard of the training set), so its metric alone describes a part.
// Model::eval therefore adds every metric's sums (Metric::sums: Accuracy's correct and total,
// Loss's sum of batch losses and batch count) over the world group, one AllReduce of float64, and
// every rank reports the metric of the whole set: the same number on every rank. A rank that
// evaluates the whole set unsharded gets the value it would alone (every sum is multiplied by the
// number of ranks). eval is then collective, as every rank of a data-parallel job runs the same
// program. A metric without sums (a user's own that does not override them) stays per rank, and
// eval says so once on stderr.
void add_over_ranks(const MetricMap& metrics) {
  if (runtime::get_auto_parallel_context().parallel_mode != runtime::DATA_PARALLEL) return;
  const std::shared_ptr<comm::ProcessGroup> world = comm::get_group(comm::kWorldGroup);
  if (world == nullptr || world->size() == 1) return;
  std::vector<double> all;
  std::vector<std::string> own;
  for (const auto& [name, metric] : metrics) {
    const std::vector<double> sums = metric->sums();
    if (sums.empty()) own.push_back(name);
    all.insert(all.end(), sums.begin(), sums.end());
  }
  if (!all.empty()) {
    const Tensor t = Tensor::from_vector(all);
    world->all_reduce(t, comm::ReduceOp::kSum);
    const std::vector<double> total = t.to_double_vector();
    size_t at = 0;
    for (const auto& [name, metric] : metrics) {
      const size_t n = metric->sums().size();
      if (n == 0) continue;
      metric->set_sums(std::vector<double>(total.begin() + static_cast<std::ptrdiff_t>(at),
                                           total.begin() + static_cast<std::ptrdiff_t>(at + n)));
      at += n;
    }
  }
  static std::atomic<bool> warned{false};
  if (!own.empty() && !warned.exchange(true)) {
    std::fprintf(stderr,
                 "cleave: Model.eval: metric(s) '%s' define no sums() to add over the %d "
                 "data-parallel ranks; each rank reports the value of its own data\n",
                 fmt::format("{}", fmt::join(own, "', '")).c_str(), world->size());
  }
}

void warn_sink_mode(bool dataset_sink_mode) {
  if (!dataset_sink_mode) return;
  std::fprintf(stderr,
               "Model: dataset_sink_mode is not supported on this device; training with the "
               "dataset not sunk (as MindSpore does on CPU)\n");
}

// Puts a cell in inference mode and restores its mode on scope exit (also on an exception).
class InferenceMode {
 public:
  explicit InferenceMode(nn::Cell& cell) : cell_(cell), was_training_(cell.training()) {
    cell_.set_train(false);
  }
  ~InferenceMode() { cell_.set_train(was_training_); }
  InferenceMode(const InferenceMode&) = delete;
  InferenceMode& operator=(const InferenceMode&) = delete;

 private:
  nn::Cell& cell_;
  bool was_training_;
};

}  // namespace

// ---- EagerTrainStep ----

void TrainStep::share_placed_state(const std::vector<Tensor>& /*tensors*/) {
  CLEAVE_CHECK_ARG(!placed(),
                   "this training step runs placed over several workers but cannot gather their "
                   "parameters (override TrainStep::share_placed_state), so it cannot be saved");
}

void TrainStep::compile(const Tensor& /*data*/, const Tensor& /*label*/) {}

EagerTrainStep::EagerTrainStep(nn::CellPtr network, nn::CellPtr loss_fn,
                               std::shared_ptr<optim::Optimizer> optimizer)
    : network_(std::move(network)), loss_fn_(std::move(loss_fn)), optimizer_(std::move(optimizer)) {
  CLEAVE_ASSERT(network_ && optimizer_);
}

Tensor EagerTrainStep::operator()(const Tensor& data, const Tensor& label) {
  Tensor loss = loss_fn_ ? (*loss_fn_)((*network_)(data), label) : (*network_)(data, label);
  autodiff::backward(loss);
  optimizer_->step();
  optimizer_->zero_grad();
  return loss.detach();
}

// ---- ContextTrainStep ----

ContextTrainStep::ContextTrainStep(nn::CellPtr network, nn::CellPtr loss_fn,
                                   std::shared_ptr<optim::Optimizer> optimizer)
    : step_(std::make_unique<optim::TrainOneStep>(
          loss_fn ? std::make_shared<nn::WithLossCell>(std::move(network), std::move(loss_fn))
                  : std::move(network),
          std::move(optimizer))) {}

Tensor ContextTrainStep::operator()(const Tensor& data, const Tensor& label) {
  return (*step_)(data, label);
}

void ContextTrainStep::compile(const Tensor& data, const Tensor& label) {
  step_->compile({data.shape(), data.dtype()}, {label.shape(), label.dtype()});
}

namespace {

// The index in `rows` of a row with the shapes and dtypes of `row`, appending it when new.
size_t shape_index(std::vector<dataset::Row>& rows, const dataset::Row& row) {
  auto same = [&](const dataset::Row& r) {
    if (r.size() != row.size()) return false;
    for (size_t c = 0; c < r.size(); ++c) {
      if (r[c].shape() != row[c].shape() || r[c].dtype() != row[c].dtype()) return false;
    }
    return true;
  };
  for (size_t i = 0; i < rows.size(); ++i) {
    if (same(rows[i])) return i;
  }
  rows.push_back(row);
  return rows.size() - 1;
}

}  // namespace

// ---- Model ----

Model::Model(nn::CellPtr network, nn::CellPtr loss_fn, std::shared_ptr<optim::Optimizer> optimizer,
             MetricMap metrics)
    : network_(std::move(network)),
      loss_fn_(std::move(loss_fn)),
      optimizer_(std::move(optimizer)),
      metrics_(std::move(metrics)) {
  CLEAVE_CHECK_ARG(network_ != nullptr, "Model: the network is null; expected a Cell");
  for (const auto& [name, metric] : metrics_) {
    CLEAVE_CHECK_ARG(metric != nullptr, "Model: metric '{}' is null; expected a Metric", name);
  }
  if (optimizer_) train_step_ = std::make_shared<ContextTrainStep>(network_, loss_fn_, optimizer_);
  forward_ = std::make_unique<optim::Forward>(network_);
}

void Model::set_train_step(std::shared_ptr<TrainStep> step) {
  CLEAVE_CHECK_ARG(step != nullptr, "Model.set_train_step: the step is null");
  train_step_ = std::move(step);
}

void Model::build(const dataset::DatasetPtr& train_dataset) {
  CLEAVE_CHECK_ARG(train_step_ != nullptr,
                   "Model.build: the model has no optimizer; pass one to Model(network, loss_fn, "
                   "optimizer, ...)");
  CLEAVE_CHECK_ARG(train_dataset != nullptr, "Model.build: the dataset is null");
  // The first batch's shapes, from a pass of epoch 0 pulled here: create_tuple_iterator would
  // start the pipeline's next epoch, and train() would then see other batches.
  const dataset::ColumnMask all(train_dataset->column_names().size(), true);
  dataset::Row row;
  CLEAVE_CHECK_ARG(train_dataset->make_iterator(0, all)->next(row),
                   "Model.build: the dataset is empty; expected at least one batch (is batch_size "
                   "larger than the data set with drop_remainder?)");
  check_row("build", *train_dataset, row);
  train_step_->compile(row[0], row[1]);
}

void Model::train(int64_t epoch, const dataset::DatasetPtr& train_dataset,
                  const std::vector<CallbackPtr>& callbacks, bool dataset_sink_mode) {
  CLEAVE_CHECK_ARG(train_step_ != nullptr,
                   "Model.train: the model has no optimizer; pass one to Model(network, loss_fn, "
                   "optimizer, ...)");
  CLEAVE_CHECK_ARG(epoch >= 1, "Model.train: epoch is {}; expected an integer >= 1", epoch);
  CLEAVE_CHECK_ARG(train_dataset != nullptr, "Model.train: the dataset is null");
  for (size_t i = 0; i < callbacks.size(); ++i) {
    CLEAVE_CHECK_ARG(callbacks[i] != nullptr, "Model.train: callback {} is null", i);
  }
  warn_sink_mode(dataset_sink_mode);
  const int64_t batch_num = train_dataset->get_dataset_size();
  CLEAVE_CHECK_ARG(batch_num > 0,
                   "Model.train: the dataset is empty (get_dataset_size() is 0); expected at least "
                   "one batch (is batch_size larger than the data set with drop_remainder?)");

  // Where this run starts: at the beginning, or after the steps of a loaded checkpoint.
  int64_t start_step = 0;
  if (resume_step_ >= 0) {
    start_step = resume_step_;
    const int64_t epoch_of_step = (start_step + batch_num - 1) / batch_num;
    CLEAVE_CHECK_ARG(epoch_of_step == resume_epoch_,
                     "Model.train: the loaded checkpoint was saved at epoch {} after {} steps, but "
                     "with this dataset's {} batches per epoch step {} is in epoch {}; resume with "
                     "the dataset of the saved run (same batch size, drop_remainder and repeat)",
                     resume_epoch_, start_step, batch_num, start_step, epoch_of_step);
    resume_step_ = -1;
  }
  int64_t epochs_done = start_step / batch_num;
  const int64_t steps_to_skip = start_step % batch_num;
  // The pipeline's epochs before the resumed one: each create_tuple_iterator() call starts the
  // pipeline's next epoch (its next shuffle order), so the resumed epochs see the same batches.
  for (int64_t e = 0; e < epochs_done; ++e) train_dataset->create_tuple_iterator();

  RunContext ctx;
  ctx.epoch_num = epoch;
  ctx.batch_num = batch_num;
  ctx.cur_epoch_num = epochs_done;
  ctx.cur_step_num = start_step;
  ctx.network = network_.get();
  ctx.train_step = train_step_.get();
  ctx.optimizer = optimizer_.get();
  progress_ = {.epoch_num = (start_step + batch_num - 1) / batch_num, .step_num = start_step};
  auto each = [&](void (Callback::*hook)(RunContext&)) {
    for (const CallbackPtr& cb : callbacks) ((*cb).*hook)(ctx);
  };

  network_->set_train(true);
  each(&Callback::on_train_begin);
  // One iterator over all the epochs left, so that the pipeline prepares the next epoch (fills
  // its shuffle buffer) while this one trains.
  std::unique_ptr<dataset::Iterator> it;
  if (epochs_done < epoch) it = train_dataset->create_tuple_iterator(epoch - epochs_done);
  // NOTE [Workers that read no batch]
  // A worker whose part of a placed step reads neither data nor label (in seed 000 all but
  // workers 0 and 3) still needs every step's batch shapes, which select the compiled graph and
  // must agree on all workers, but not the batches: decoding them costs a core's time that the
  // other workers' stages need. So the first whole epoch of this call pulls every row and
  // remembers the sequence of batch shapes (one row kept per distinct shape); in later epochs,
  // when the step reads no input, the worker replays that sequence instead of pulling rows
  // (every epoch of a pipeline has the same batch sizes: get_dataset_size() relies on it too).
  // A worker that reads only some inputs (seed 000's worker 0 reads the label, worker 3 the
  // image) asks the pipeline, once its first step of that recording epoch has told which, for
  // those columns only in the epochs it has not begun yet (Iterator::set_needed_columns, NOTE
  // [Column projection] in cleave/data/dataset.h): the maps of the other column are skipped and
  // batch does not stack it. Such a row's unread column is then undefined and is filled from the
  // recorded row of the same step's shape (its values are never read: checked after the step).
  // A worker that reads none asks for no column: the prefetch of the next epoch, which its
  // replay never pulls, then decodes and transforms nothing.
  std::vector<dataset::Row> shape_rows;  // one row per distinct batch signature
  std::vector<size_t> shape_of_step;     // per step of the recorded epoch: index into shape_rows
  bool recorded = false;
  bool asked = false;  // the step was asked which inputs it reads (in the recording epoch)
  for (; epochs_done < epoch && !ctx.stop_requested; ++epochs_done) {
    ctx.cur_epoch_num = epochs_done + 1;
    ctx.step_in_epoch = 0;
    ctx.loss = Tensor();
    each(&Callback::on_epoch_begin);
    const bool recording = !recorded && !(ctx.cur_step_num == start_step && steps_to_skip > 0);
    if (recording) shape_of_step.clear();
    const bool replay = recorded && !train_step_->reads_inputs();
    dataset::Row row;
    int64_t step = 0;
    auto next_row = [&] {
      if (!replay) return it->next(row);
      if (step >= static_cast<int64_t>(shape_of_step.size())) return false;
      row = shape_rows[shape_of_step[step]];
      return true;
    };
    while (!ctx.stop_requested && next_row()) {
      ++step;
      if (ctx.cur_step_num == start_step && step <= steps_to_skip) continue;  // done before
      check_row("train", *train_dataset, row);
      // A projected row: fill its unneeded column from the recorded row of this step's shape.
      bool filled[2] = {false, false};
      if (!row[0].defined() || !row[1].defined()) {
        CLEAVE_ASSERT(recorded && step <= static_cast<int64_t>(shape_of_step.size()),
                      "a projected row before the batch shapes were recorded");
        const dataset::Row& shapes = shape_rows[shape_of_step[step - 1]];
        for (size_t c = 0; c < 2; ++c) {
          if (!row[c].defined()) {
            row[c] = shapes[c];
            filled[c] = true;
          } else {
            CLEAVE_CHECK_ARG(
                row[c].shape() == shapes[c].shape() && row[c].dtype() == shapes[c].dtype(),
                "Model.train: step {} of epoch {} has column '{}' of shape {} {}, but "
                "that step of the first epoch had {} {}; a worker of a placed network "
                "that reads only some columns needs the same batch shapes in every "
                "epoch",
                step, ctx.cur_epoch_num, train_dataset->column_names()[c],
                dtype_name(row[c].dtype()), row[c].shape().to_string(),
                dtype_name(shapes[c].dtype()), shapes[c].shape().to_string());
          }
        }
      }
      if (recording) shape_of_step.push_back(shape_index(shape_rows, row));
      ctx.step_in_epoch = step;
      each(&Callback::on_step_begin);
      ctx.loss = (*train_step_)(row[0], row[1]);
      ctx.placed = train_step_->placed();
      if (filled[0] || filled[1] || (recording && !asked)) {
        const std::vector<bool> read = train_step_->inputs_read();
        CLEAVE_ASSERT(read.size() == 2 && !(filled[0] && read[0]) && !(filled[1] && read[1]),
                      "the step read a column that Model did not pull (NOTE [Workers that read no "
                      "batch])");
        if (recording && !asked && !(read[0] && read[1])) {
          it->set_needed_columns({read[0], read[1]});
        }
        asked = asked || recording;
      }
      ++ctx.cur_step_num;
      progress_ = {.epoch_num = ctx.cur_epoch_num, .step_num = ctx.cur_step_num};
      each(&Callback::on_step_end);
    }
    recorded = recorded || (recording && !ctx.stop_requested &&
                            static_cast<int64_t>(shape_of_step.size()) == batch_num);
    each(&Callback::on_epoch_end);
    meet_after_placed_epoch(*train_step_);
  }
  it.reset();
  each(&Callback::on_train_end);
}

EvalResult Model::eval(const dataset::DatasetPtr& valid_dataset, bool dataset_sink_mode) {
  CLEAVE_CHECK_ARG(!metrics_.empty(),
                   "Model.eval: the model has no metrics; pass them to Model(network, loss_fn, "
                   "optimizer, {{\"Accuracy\", std::make_shared<Accuracy>()}})");
  CLEAVE_CHECK_ARG(valid_dataset != nullptr, "Model.eval: the dataset is null");
  warn_sink_mode(dataset_sink_mode);
  bool needs_loss = false;
  for (const auto& [name, metric] : metrics_) {
    metric->clear();
    for (int index : metric->input_indexes()) {
      CLEAVE_CHECK_ARG(index >= 0 && index <= 2,
                       "Model.eval: metric '{}' asks for evaluation output {}; expected 0 (loss), "
                       "1 (logits) or 2 (label)",
                       name, index);
      if (index == 0) needs_loss = true;
    }
  }
  CLEAVE_CHECK_ARG(!needs_loss || loss_fn_ != nullptr,
                   "Model.eval: a metric needs the loss but the model has no loss_fn; pass one "
                   "to Model(network, loss_fn, ...)");

  InferenceMode inference(*network_);
  NoGradGuard no_grad;
  std::unique_ptr<dataset::Iterator> it = valid_dataset->create_tuple_iterator();
  dataset::Row row;
  int64_t batches = 0, outputs_seen = 0;
  while (it->next(row)) {
    check_row("eval", *valid_dataset, row);
    ++batches;
    const Tensor logits = (*forward_)(row[0]);
    if (!logits.defined()) continue;  // a placed network's outputs are on worker 0
    ++outputs_seen;
    const Tensor loss = needs_loss ? (*loss_fn_)(logits, row[1]) : Tensor();
    const Tensor outputs[3] = {loss, logits, row[1]};
    for (const auto& [name, metric] : metrics_) {
      std::vector<Tensor> inputs;
      for (int index : metric->input_indexes()) inputs.push_back(outputs[index]);
      metric->update(inputs);
    }
  }
  CLEAVE_CHECK_ARG(batches > 0, "Model.eval: the dataset gave no rows; expected at least one");
  std::vector<std::pair<std::string, double>> values;
  if (outputs_seen == 0) return EvalResult(std::move(values));  // not worker 0 of a placed net
  add_over_ranks(metrics_);                                     // NOTE [Metrics over ranks]
  for (const auto& [name, metric] : metrics_) values.emplace_back(name, metric->eval());
  return EvalResult(std::move(values));
}

Tensor Model::predict(const Tensor& data) {
  CLEAVE_CHECK_ARG(data.defined(), "Model.predict: the input is an undefined Tensor");
  InferenceMode inference(*network_);
  NoGradGuard no_grad;
  return (*forward_)(data);
}

void Model::save_train_state(const std::string& path) const {
  const NamedTensors state = train_state_tensors(*network_, optimizer_.get(), progress_);
  if (train_step_ != nullptr && train_step_->placed()) {
    // NOTE [Saving a placed network] in cleave/runtime/placed_state.h: collective.
    std::vector<Tensor> values;
    for (const auto& [name, t] : state) values.push_back(t);
    train_step_->share_placed_state(values);
  }
  save_checkpoint(state, path);
}

void Model::load_train_state(const std::string& path) {
  CLEAVE_CHECK_ARG(optimizer_ != nullptr,
                   "Model.load_train_state: the model has no optimizer to restore into");
  resume_from(restore_train_state(*network_, *optimizer_, load_checkpoint(path)), path);
}

void Model::load_distributed_checkpoint(const std::string& directory,
                                        const std::string& strategy_file,
                                        const std::string& prefix) {
  CLEAVE_CHECK_ARG(optimizer_ != nullptr,
                   "Model.load_distributed_checkpoint: the model has no optimizer to restore into");
  std::vector<std::string> files;
  resume_from(train::load_distributed_checkpoint(*network_, optimizer_.get(), directory,
                                                 strategy_file, prefix, &files),
              directory);
  loaded_files_ = std::move(files);
}

void Model::resume_from(const TrainProgress& progress, const std::string& source) {
  // In a job every rank must continue from the same step: ranks that loaded different steps (a
  // folder of each, one of them holding a newer save) would train on silently apart.
  const std::shared_ptr<comm::ProcessGroup> world = comm::get_group(comm::kWorldGroup);
  if (world != nullptr && world->size() > 1) {
    const double step = static_cast<double>(progress.step_num);
    const Tensor range = Tensor::from_vector(std::vector<double>{step, -step});
    world->all_reduce(range, comm::ReduceOp::kMax);
    const std::vector<double> r = range.to_double_vector();
    CLEAVE_CHECK_ARG(r[0] == -r[1],
                     "cannot resume training: rank {} loaded step {} from '{}', but the ranks of "
                     "the job loaded steps {} to {}: their checkpoints are of different saves. "
                     "Load one set every rank completed (Model.load_distributed_checkpoint takes "
                     "the newest; NOTE [Checkpoint sets])",
                     world->rank(), progress.step_num, source, -r[1], r[0]);
  }
  progress_ = progress;
  resume_step_ = progress.step_num;
  resume_epoch_ = progress.epoch_num;
}

}  // namespace cleave::train
