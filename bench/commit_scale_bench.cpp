// sync_all commits against the number of ranks, each rank a process of this machine, as under
// `srun -n N`: one store served by this process (hydro's, MUNGE-authenticated), one shared
// checkpoint root, the same state per rank at every N. For N = 2, 4, 8, 16, 32 it prints the
// median time of one collective commit (every rank's shard written and fsynced, the committer's
// barrier, manifest, rename, `latest`, every rank told), at a small state (the coordination) and a
// large one (the bytes), and each against N = 2.
// On one machine the bytes of all ranks share its disk and CPUs, so the large-state column grows
// with N × state here; on a cluster each node writes its own ranks' bytes. The small-state column
// is the coordination, which should grow far less than N.
// Needs munged (scripts/slurm-local munge). Usage: hydro-bench-commit-scale --help.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "bench_usage.h"
#include "hydro/checkpoint_dir.h"
#include "hydro/checkpoint_group.h"
#include "hydro/tcp_store.h"

namespace {

using namespace hydro;
using Clock = std::chrono::steady_clock;

struct Run {
  std::string root, scope;
  int world;
  size_t bytes;
  int rounds;
};

// Rank 0 serves the store and hands its port to the others (`ports`); each rank is a process forked
// before any thread exists.
Status connect(const Run& run, int rank, int ports[2], std::unique_ptr<TcpStoreServer>* server,
               std::unique_ptr<RankStore>* store) {
  int port = 0;
  if (rank == 0) {
    HYDRO_RETURN_IF_ERROR(TcpStoreServer::start(0, run.scope, server));
    port = (*server)->port();
    for (int r = 1; r < run.world; ++r)
      if (write(ports[1], &port, sizeof port) != sizeof port) return Status::io("cannot hand out the port");
  } else if (read(ports[0], &port, sizeof port) != sizeof port) {
    return Status::io("no port from rank 0");
  }
  return connect_tcp_store("127.0.0.1", port, run.scope, std::chrono::seconds(60), store);
}

// One rank: `rounds` collective commits; rank 0 writes the median ms to `out`.
Status run_rank(const Run& run, int rank, int ports[2], int out) {
  std::unique_ptr<TcpStoreServer> server;
  std::unique_ptr<RankStore> store;
  HYDRO_RETURN_IF_ERROR(connect(run, rank, ports, &server, &store));
  CheckpointGroup group(*store, rank, run.world, "bench-host", std::chrono::seconds(300));
  CheckpointDir dir(run.root, posix_fs(), 2);
  HYDRO_RETURN_IF_ERROR(dir.open(rank == 0));
  const std::string state(run.bytes, static_cast<char>('a' + rank % 26));
  std::vector<double> ms;
  for (int i = 1; i <= run.rounds; ++i) {
    GroupDecision d;
    HYDRO_RETURN_IF_ERROR(group.vote(CheckpointMode::sync_all, true, false, &d));  // lines the ranks up
    auto t = Clock::now();
    CheckpointInfo info;
    HYDRO_RETURN_IF_ERROR(group.save(
        dir, i, false, 0, [&](CheckpointWriter& w) { return w.write_file("state.bin", state); }, &info));
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t).count());
  }
  int missing = 0;
  (void)group.leave(std::chrono::seconds(60), &missing);
  std::sort(ms.begin(), ms.end());
  double median = ms[ms.size() / 2];
  if (rank == 0 && write(out, &median, sizeof median) != sizeof median) return Status::io("cannot report");
  return Status::OK();
}

// The median commit of `run.world` rank processes, in ms; negative on a failure.
double measure(const Run& run) {
  std::filesystem::remove_all(run.root);
  int ports[2], results[2];
  if (pipe(ports) != 0 || pipe(results) != 0) return -1;
  std::vector<pid_t> pids;
  for (int r = 0; r < run.world; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      Status st = run_rank(run, r, ports, results[1]);
      if (!st.ok()) std::fprintf(stderr, "rank %d: %s\n", r, st.message().c_str());
      _exit(st.ok() ? 0 : 1);
    }
    pids.push_back(pid);
  }
  close(results[1]);
  bool ok = true;
  for (pid_t pid : pids) {
    int status = 0;
    ok = waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0 && ok;
  }
  double median = -1;
  if (!ok || read(results[0], &median, sizeof median) != sizeof median) median = -1;
  for (int fd : {ports[0], ports[1], results[0]}) close(fd);
  return median;
}

}  // namespace

int main(int argc, char** argv) {
  hydro_bench::exit_on_options(
      argc, argv,
      "usage: hydro-bench-commit-scale [ROOT] [ROUNDS]\n  sync_all commits against the number of ranks, 2 to 32 "
      "processes here (default ROOT /tmp/hydro-bench-commit-scale, ROUNDS 9; needs munged)");
  const std::string root = argc > 1 ? argv[1] : "/tmp/hydro-bench-commit-scale";
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 9;
  const size_t small = 4 << 10, large = 4 << 20;
  std::printf("sync_all commit, ranks as processes on this machine, median of %d commits\n", rounds);
  std::printf("%5s %16s %10s %16s %10s\n", "ranks", "4 KiB/rank (ms)", "vs N=2", "4 MiB/rank (ms)", "vs N=2");
  double small2 = 0, large2 = 0;
  int generation = 0;
  for (int world : {2, 4, 8, 16, 32}) {
    double s = measure({root, "job bench step " + std::to_string(++generation), world, small, rounds});
    double l = measure({root, "job bench step " + std::to_string(++generation), world, large, rounds});
    if (s < 0 || l < 0) return std::fprintf(stderr, "%d ranks failed (is munged running?)\n", world), 1;
    if (world == 2) small2 = s, large2 = l;
    std::printf("%5d %16.1f %9.2fx %16.1f %9.2fx\n", world, s, s / small2, l, l / large2);
  }
  std::filesystem::remove_all(root);
  return 0;
}
