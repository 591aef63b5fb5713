// Under mpirun -n 2: rank 0 calls AllReduce on a group with a 500 ms timeout, rank 1 never does.
// The MPI backend's watchdog (NOTE [MPI timeouts] in src/comm/mpi/mpi_process_group.cc) must end
// the whole job with one line naming the operation, the group and the rank; watchdog_test.sh
// checks that.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "cleave/comm/process_group.h"

int main() {
  using namespace cleave;
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (rank == nullptr || size == nullptr) {
    std::fprintf(stderr, "mpi_watchdog_program: run me under mpirun -n 2\n");
    return 2;
  }
  comm::ProcessGroupOptions o;
  o.backend = "mpi";
  o.rank = std::atoi(rank);
  o.size = std::atoi(size);
  o.name = "watched";
  o.timeout = std::chrono::milliseconds(500);
  auto group = comm::create_process_group(o);
  Tensor t = Tensor::ones(Shape({1000}), DType::kFloat32);
  group->all_reduce(t);  // both ranks: completes
  std::printf("rank %d: first AllReduce ok\n", o.rank);
  std::fflush(stdout);
  if (o.rank == 0) group->all_reduce(t);  // rank 1 never joins: the watchdog ends the job
  std::this_thread::sleep_for(std::chrono::seconds(30));
  std::fprintf(stderr, "mpi_watchdog_program: rank %d was not stopped\n", o.rank);
  return 3;
}
