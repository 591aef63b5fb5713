// Machine profiles (cleave/parallel/machine_profile.h): the JSON round trip, an Error naming the
// file and the key for every bad input, the warning about a profile of another machine, the
// shipped default, and cleave-calibrate --quick writing a profile that loads.
#include "cleave/parallel/machine_profile.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cleave/core/error.h"
#include "cleave/parallel/calibrated_cost_model.h"
#include "cleave/runtime/context.h"

namespace cleave::parallel {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// A small valid profile of this machine: shm and gloo measured at 2 and 4 ranks.
MachineProfile sample_profile() {
  MachineProfile p;
  p.machine = this_machine();
  p.machine.measured_at = "2026-01-01T00:00:00Z";
  p.machine.backends = {"gloo", "shm"};
  ComputeTable t;
  t.threads = 1;
  t.matmul = {{"small", "gemm 16", 8192, 1e9}, {"large", "gemm 512", 2.7e8, 5e10}};
  t.convolution = {{"small", "conv a", 1e5, 1e9}, {"large", "conv b", 1e9, 3e10}};
  t.memory = {{"small", "add 256", 3072, 1e9}, {"large", "add 1M", 1.2e7, 1e10}};
  p.compute.push_back(t);
  for (const char* name : {"shm", "gloo"}) {
    BackendProfile b;
    b.measured = true;
    b.ranks = "threads";
    for (Collective c : {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                         Collective::kAllToAll, Collective::kBroadcast}) {
      b.collectives[c] = {{2, 1e-5, 2e9, {{1024, 1.05e-5}, {1 << 20, 5.3e-4}}},
                          {4, 3e-5, 1e9, {{1024, 3.1e-5}}}};
    }
    p.backends[name] = b;
  }
  p.backends["mpi"].reason = "not launched by mpirun";
  p.backends["nccl"].reason = "no GPU";
  return p;
}

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("cleave_profile_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

// The message of the Error that reading `text` as file "f.json" throws ("" when none).
std::string error_of(const std::string& text) {
  try {
    profile_from_json(text, "f.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The sample profile's JSON with `edit` applied.
std::string edited(const std::function<void(json&)>& edit) {
  json j = json::parse(profile_to_json(sample_profile()));
  edit(j);
  return j.dump();
}

TEST(MachineProfile, JsonRoundTripKeepsEveryField) {
  const MachineProfile p = sample_profile();
  const std::string text = profile_to_json(p);
  const MachineProfile q = profile_from_json(text, "round trip");
  EXPECT_EQ(profile_to_json(q), text);
  EXPECT_EQ(q.machine.cpu_model, p.machine.cpu_model);
  EXPECT_EQ(q.machine.cores, p.machine.cores);
  EXPECT_EQ(q.compute.at(0).matmul.at(1).rate, 5e10);
  EXPECT_EQ(q.backends.at("shm").collectives.at(Collective::kAllToAll).at(1).group_size, 4);
  EXPECT_FALSE(q.backends.at("nccl").measured);
  EXPECT_EQ(q.backends.at("nccl").reason, "no GPU");
}

TEST(MachineProfile, SaveAndLoadAFile) {
  const std::string path = temp_path("save.json");
  save_machine_profile(sample_profile(), path);
  EXPECT_EQ(profile_to_json(load_machine_profile(path)), profile_to_json(sample_profile()));
  fs::remove(path);
}

TEST(MachineProfile, MissingKeyNamesFileAndKey) {
  const std::string e = error_of(
      edited([](json& j) { j["comm"]["shm"]["collectives"]["all_reduce"][0].erase("latency_s"); }));
  EXPECT_NE(e.find("'f.json'"), std::string::npos) << e;
  EXPECT_NE(e.find("key \"comm.shm.collectives.all_reduce[0].latency_s\" is missing"),
            std::string::npos)
      << e;
  const std::string m = error_of(edited([](json& j) { j["comm"].erase("nccl"); }));
  EXPECT_NE(m.find("key \"comm.nccl\" is missing; expected an object"), std::string::npos) << m;
}

TEST(MachineProfile, WrongTypeNamesFileKeyAndExpectedType) {
  const std::string e = error_of(edited([](json& j) { j["machine"]["cores"] = "two"; }));
  EXPECT_NE(e.find("machine profile 'f.json': key \"machine.cores\" is the string \"two\"; "
                   "expected a whole number >= 1"),
            std::string::npos)
      << e;
  const std::string b = error_of(edited([](json& j) { j["comm"]["gloo"]["measured"] = 1; }));
  EXPECT_NE(b.find("key \"comm.gloo.measured\" is the number 1; expected true or false"),
            std::string::npos)
      << b;
}

TEST(MachineProfile, NegativeOrZeroRateNamesFileAndKey) {
  const std::string e =
      error_of(edited([](json& j) { j["compute"][0]["matmul"][1]["flops_per_s"] = -5; }));
  EXPECT_NE(e.find("'f.json': key \"compute[0].matmul[1].flops_per_s\" is -5; expected a number "
                   "> 0 (flops per second)"),
            std::string::npos)
      << e;
  const std::string z = error_of(edited([](json& j) {
    j["comm"]["shm"]["collectives"]["broadcast"][1]["bandwidth_bytes_per_s"] = 0;
  }));
  EXPECT_NE(z.find("key \"comm.shm.collectives.broadcast[1].bandwidth_bytes_per_s\" is 0"),
            std::string::npos)
      << z;
  const std::string l = error_of(edited(
      [](json& j) { j["comm"]["gloo"]["collectives"]["all_gather"][0]["latency_s"] = -1e-6; }));
  EXPECT_NE(l.find("latency_s\" is -1e-06; expected a number >= 0 (seconds)"), std::string::npos)
      << l;
}

TEST(MachineProfile, OtherBadInputsNameTheKey) {
  EXPECT_NE(error_of(edited([](json& j) { j["version"] = 2; })).find("key \"version\" is 2"),
            std::string::npos);
  EXPECT_NE(error_of(edited([](json& j) {
              j["compute"][0]["memory"] = json::array();
            })).find("key \"compute[0].memory\" is empty"),
            std::string::npos);
  EXPECT_NE(error_of(edited([](json& j) {
              j["compute"][0]["matmul"][1]["flops"] = 10;
            })).find("key \"compute[0].matmul[1].flops\" is 10; expected the points ascending"),
            std::string::npos);
  EXPECT_NE(error_of(edited([](json& j) {
              j["machine"]["backends"].push_back("mpi");
            })).find("key \"machine.backends\" names \"mpi\""),
            std::string::npos);
  EXPECT_NE(error_of("{\"format\": ").find("'f.json' is not valid JSON"), std::string::npos);
  EXPECT_NE(error_of("[1]").find("'f.json' is an array"), std::string::npos);
}

TEST(MachineProfile, TimedOpSlicesRoundTripAndBadOnesNameTheKey) {
  MachineProfile p = sample_profile();
  const std::string a = "Conv2D{group: 1} (Float32(8, 1, 32, 32), Float32(6, 1, 5, 5)) grads 01";
  const std::string b = "MatMul{} (Float32(4, 8), Float32(8, 16)) grads 11";
  add_op_timings(p.compute[0], {{b, 2e-5}, {a, 1e-4}});
  add_op_timings(p.compute[0], {{b, 3e-5}});  // timed again: the new time
  ASSERT_EQ(p.compute[0].ops.size(), 2u);
  EXPECT_EQ(p.compute[0].ops[0].key, a);  // ascending in key
  EXPECT_EQ(p.compute[0].ops[1].seconds, 3e-5);
  const std::string text = profile_to_json(p);
  const MachineProfile q = profile_from_json(text, "round trip");
  EXPECT_EQ(profile_to_json(q), text);
  ASSERT_EQ(q.compute[0].ops.size(), 2u);
  EXPECT_EQ(q.compute[0].ops[1].key, b);
  // The table of the model's thread count answers for its keys, times the compute slowdown.
  const CalibratedCostModel model(q, {.compute_slowdown = 2});
  EXPECT_TRUE(model.has_measured_ops());
  EXPECT_EQ(model.measured_s(b), 6e-5);
  EXPECT_EQ(model.measured_s("MatMul{} (Float32(4, 8), Float32(8, 16)) grads 01"), std::nullopt);
  EXPECT_FALSE(CalibratedCostModel(sample_profile()).has_measured_ops());

  const auto with_ops = [&](const json& ops) {
    return edited([&](json& j) { j["compute"][0]["ops"] = ops; });
  };
  const std::string order = error_of(
      with_ops(json::array({{{"key", b}, {"seconds", 1e-5}}, {{"key", a}, {"seconds", 1e-5}}})));
  EXPECT_NE(order.find("key \"compute[0].ops[1].key\" is \"Conv2D"), std::string::npos) << order;
  EXPECT_NE(order.find("expected the keys ascending, each once"), std::string::npos) << order;
  const std::string twice = error_of(
      with_ops(json::array({{{"key", a}, {"seconds", 1e-5}}, {{"key", a}, {"seconds", 2e-5}}})));
  EXPECT_NE(twice.find("expected the keys ascending, each once"), std::string::npos) << twice;
  const std::string zero = error_of(with_ops(json::array({{{"key", a}, {"seconds", 0}}})));
  EXPECT_NE(zero.find("key \"compute[0].ops[0].seconds\" is 0; expected a number > 0 (seconds of "
                      "one call)"),
            std::string::npos)
      << zero;
  const std::string empty = error_of(with_ops(json::array({{{"key", ""}, {"seconds", 1}}})));
  EXPECT_NE(empty.find("key \"compute[0].ops[0].key\" is empty"), std::string::npos) << empty;
  const std::string type = error_of(with_ops(json::object()));
  EXPECT_NE(type.find("key \"compute[0].ops\" is an object; expected an array of timed op slices"),
            std::string::npos)
      << type;
}

TEST(MachineProfile, SharedCoresRowsRoundTripAndBadOnesNameTheKey) {
  MachineProfile p = sample_profile();
  p.backends["shm"].shared_cores = {{4, 2, 8e-6}, {4, 4, 1.1e-5}, {8, 2, 2e-5}};
  const std::string text = profile_to_json(p);
  const MachineProfile q = profile_from_json(text, "round trip");
  EXPECT_EQ(profile_to_json(q), text);
  ASSERT_EQ(q.backends.at("shm").shared_cores.size(), 3u);
  EXPECT_EQ(q.backends.at("shm").shared_cores[2].ranks, 8);
  EXPECT_EQ(q.backends.at("shm").shared_cores[1].latency_s, 1.1e-5);
  EXPECT_TRUE(q.backends.at("gloo").shared_cores.empty());  // optional
  EXPECT_EQ(json::parse(profile_to_json(sample_profile()))["comm"]["shm"].count("shared_cores"),
            0u);

  const auto with_rows = [&](const json& rows) {
    return edited([&](json& j) { j["comm"]["shm"]["shared_cores"] = rows; });
  };
  const auto row = [](int64_t ranks, int64_t n, double s) {
    return json{{"ranks", ranks}, {"group_size", n}, {"latency_s", s}};
  };
  const std::string big = error_of(with_rows(json::array({row(4, 8, 1e-5)})));
  EXPECT_NE(big.find("key \"comm.shm.shared_cores[0].group_size\" is 8; expected at most the "
                     "job's ranks (4)"),
            std::string::npos)
      << big;
  const std::string order = error_of(with_rows(json::array({row(8, 2, 1e-5), row(4, 2, 1e-5)})));
  EXPECT_NE(order.find("key \"comm.shm.shared_cores[1]\" has ranks 4 and group_size 2; expected "
                       "the entries ascending"),
            std::string::npos)
      << order;
  const std::string twice = error_of(with_rows(json::array({row(4, 2, 1e-5), row(4, 2, 2e-5)})));
  EXPECT_NE(twice.find("each pair once"), std::string::npos) << twice;
  const std::string zero = error_of(with_rows(json::array({row(4, 2, 0)})));
  EXPECT_NE(zero.find("key \"comm.shm.shared_cores[0].latency_s\" is 0.0; expected a number > 0"),
            std::string::npos)
      << zero;
  const std::string one = error_of(with_rows(json::array({row(1, 1, 1e-5)})));
  EXPECT_NE(one.find("key \"comm.shm.shared_cores[0].ranks\" is the number 1; expected a whole "
                     "number >= 2"),
            std::string::npos)
      << one;
  const std::string type = error_of(with_rows(json::object()));
  EXPECT_NE(type.find("key \"comm.shm.shared_cores\" is an object; expected an array of job and "
                      "group sizes"),
            std::string::npos)
      << type;
}

TEST(MachineProfile, UnreadableFileNamesTheFile) {
  const std::string path = temp_path("absent.json");
  try {
    load_machine_profile(path);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot load machine profile '" + path + "'"),
              std::string::npos)
        << e.what();
  }
}

TEST(MachineProfile, ContextChecksTheProfileFile) {
  runtime::AutoParallelContext c;
  c.cost_model_profile = temp_path("absent_context.json");
  try {
    runtime::set_auto_parallel_context(c);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("set_auto_parallel_context: cost_model_profile: cannot load machine "
                     "profile '" +
                     c.cost_model_profile + "'"),
              std::string::npos)
        << m;
  }
  const std::string path = temp_path("context.json");
  save_machine_profile(sample_profile(), path);
  c.cost_model_profile = path;
  runtime::set_auto_parallel_context(c);
  EXPECT_EQ(runtime::get_auto_parallel_context().cost_model_profile, path);
  runtime::reset_auto_parallel_context();
  EXPECT_EQ(runtime::get_auto_parallel_context().cost_model_profile, "");
  fs::remove(path);
}

TEST(MachineProfile, DifferenceNamesWhatDiffers) {
  const MachineInfo here = this_machine();
  EXPECT_EQ(machine_difference(here, here), "");
  MachineInfo other = here;
  other.cpu_model = "Imaginary CPU 9000";
  other.cores = here.cores + 62;
  const std::string d = machine_difference(other, here);
  EXPECT_NE(d.find("CPU \"Imaginary CPU 9000\" in the profile"), std::string::npos) << d;
  EXPECT_NE(d.find(fmt::format("cores: {} in the profile, {} here", other.cores, here.cores)),
            std::string::npos)
      << d;
}

TEST(MachineProfile, OtherMachineWarnsOnceSayingToRunCalibrate) {
  MachineProfile p = sample_profile();
  p.machine.isa = {"avx512f"};
  p.machine.cpu_model = "Imaginary CPU 9000";
  reset_machine_warning_for_testing();
  ::testing::internal::CaptureStderr();
  EXPECT_TRUE(warn_if_other_machine(p, "'p.json'"));
  EXPECT_FALSE(warn_if_other_machine(p, "'p.json'"));
  EXPECT_FALSE(warn_if_other_machine(p, "'q.json'"));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("cleave: warning: the machine profile 'p.json' was measured on another "
                     "machine"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("cleave-calibrate"), std::string::npos) << err;
  EXPECT_EQ(err.find("cleave: warning", err.find("cleave: warning") + 1), std::string::npos) << err;
  // This machine's own profile gives none.
  reset_machine_warning_for_testing();
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(warn_if_other_machine(sample_profile(), "'here.json'"));
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

TEST(MachineProfile, DefaultProfileIsCompiledInAndRecordsUnmeasuredBackends) {
  const MachineProfile& p = default_machine_profile();
  EXPECT_FALSE(p.machine.cpu_model.empty());
  EXPECT_GE(p.compute.size(), 1u);
  ASSERT_TRUE(p.backends.at("shm").measured);
  ASSERT_TRUE(p.backends.at("gloo").measured);
  EXPECT_FALSE(p.backends.at("nccl").measured);
  EXPECT_FALSE(p.backends.at("nccl").reason.empty());
  EXPECT_FALSE(p.backends.at("mpi").reason.empty() && !p.backends.at("mpi").measured);
}

#ifdef CLEAVE_BIN_DIR
// cleave-calibrate --quick measures this machine and writes a profile that loads and gives a
// model; its figures are not checked (timings belong to bench/).
TEST(MachineProfile, CalibrateQuickWritesAProfileThatLoads) {
  const std::string path = temp_path("calibrated.json");
  const std::string cmd = std::string(CLEAVE_BIN_DIR) + "/cleave-calibrate --quick -o " + path +
                          " > " + path + ".log 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const MachineProfile p = load_machine_profile(path);
  EXPECT_EQ(machine_difference(p.machine, this_machine()), "");
  EXPECT_TRUE(p.backends.at("shm").measured);
  EXPECT_TRUE(p.backends.at("gloo").measured);
  EXPECT_EQ(p.backends.at("shm").collectives.at(Collective::kAllReduce).front().group_size, 2);
  // --quick: pairs in a job of twice the cores' ranks (NOTE [Collectives of ranks sharing
  // cores]).
  const std::vector<SharedCoresLatency>& shared = p.backends.at("shm").shared_cores;
  ASSERT_EQ(shared.size(), 1u);
  EXPECT_EQ(shared[0].ranks, 2 * this_machine().cores);
  EXPECT_EQ(shared[0].group_size, 2);
  EXPECT_GT(shared[0].latency_s, 0);
  EXPECT_EQ(p.backends.at("mpi").reason, "not launched by mpirun");
  EXPECT_FALSE(p.backends.at("nccl").measured);
  const CalibratedCostModel model(p);
  EXPECT_GT(model.compute_s(ShardingRule::ComputeClass::kMatMul, 1e9, 1e6), 0);
  EXPECT_GT(model.collective_s(Collective::kAllReduce, 1e6, 2), 0);
  fs::remove(path);
  fs::remove(path + ".log");
}
#endif

}  // namespace
}  // namespace cleave::parallel
