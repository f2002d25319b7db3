// sync_all commits against the number of ranks, each rank a process of this machine, as under
// `srun -n N`: one store served by this process (hydro's, MUNGE-authenticated), one shared
// checkpoint root, the same state per rank at every N. For N = 2, 4, 8, 16, 32 it prints the
// median time of one collective commit (every rank's shard written and fsynced, the committer's
// barrier, manifest, rename, `latest`, every rank told), at a small state (the coordination) and a
// large one (the bytes), and each against N = 2. At the large state it splits the commit at the
// moment the last rank's shard was written: the bytes before, the coordination after.
// On one machine the bytes of all ranks share its disk and CPUs, so the time to the last shard grows
// with N × state here; on a cluster each node writes its own ranks' bytes. The small-state commit and
// the rest are the coordination, which should grow far less than N.
// The commits keep every checkpoint; then rank 0 times the prune keep_last would have done after
// each one (removing one checkpoint: every rank's shard of it), which a shared directory leaves to
// rank 0 alone, and which grows with N × state.
// Needs munged (scripts/slurm-local munge). Usage: hydro-bench-commit-scale --help.
#include <sys/wait.h>
#include <unistd.h>

#include <climits>

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
using hydro_bench::median;

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

// What one rank reports for each round, as steady-clock times (CLOCK_MONOTONIC: one clock for every
// process of the machine): when its save began, when its own shard's bytes were written and
// fsynced, and when its save returned. One record a rank, in one atomic pipe write.
constexpr int kMaxRounds = 64;
struct Report {
  int rank = 0;
  Clock::time_point start[kMaxRounds], written[kMaxRounds], end[kMaxRounds];
  double prune_ms = 0;  // rank 0: removing one old checkpoint, every rank's shard of it
};
static_assert(sizeof(Report) <= PIPE_BUF, "one report is one atomic pipe write");

double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// One rank: `rounds` collective commits, reported to `out`.
Status run_rank(const Run& run, int rank, int ports[2], int out) {
  std::unique_ptr<TcpStoreServer> server;
  std::unique_ptr<RankStore> store;
  HYDRO_RETURN_IF_ERROR(connect(run, rank, ports, &server, &store));
  CheckpointGroup group(*store, rank, run.world, "bench-host", std::chrono::seconds(300));
  CheckpointDir dir(run.root, posix_fs(), 0);  // keep all: pruning is timed on its own, below
  HYDRO_RETURN_IF_ERROR(dir.open(rank == 0));
  const std::string state(run.bytes, static_cast<char>('a' + rank % 26));
  Report report;
  report.rank = rank;
  for (int i = 0; i < run.rounds; ++i) {
    GroupDecision d;
    HYDRO_RETURN_IF_ERROR(group.vote(CheckpointMode::sync_all, true, false, &d));  // lines the ranks up
    report.start[i] = Clock::now();
    CheckpointInfo info;
    HYDRO_RETURN_IF_ERROR(group.save(
        dir, i + 1, false, 0,
        [&](CheckpointWriter& w) {
          Status s = w.write_file("state.bin", state);
          report.written[i] = Clock::now();
          return s;
        },
        &info));
    report.end[i] = Clock::now();
  }
  int missing = 0;
  (void)group.leave(std::chrono::seconds(60), &missing);
  if (rank == 0 && run.rounds > 1) {  // what keep_last = 1 would have removed after each commit
    auto t = Clock::now();
    HYDRO_RETURN_IF_ERROR(dir.prune(1));
    report.prune_ms = ms(Clock::now() - t) / (run.rounds - 1);
  }
  if (write(out, &report, sizeof report) != sizeof report) return Status::io("cannot report");
  return Status::OK();
}

// Medians over the rounds of one N, in ms, on rank 0's timeline: the commit (its save), split at
// the moment the last rank's shard was written: before it (the bytes, and the staging handshake),
// and after it (the rest: shard directories' fsync, the reports, manifest, rename, `latest`).
struct Figures {
  double commit = -1, written = 0, rest = 0, prune = 0;
};

Figures summarize(const std::vector<Report>& reports, int rounds) {
  std::vector<double> commit, written, rest;
  const Report& zero = *std::find_if(reports.begin(), reports.end(), [](const Report& r) { return r.rank == 0; });
  for (int i = 0; i < rounds; ++i) {
    Clock::time_point last = zero.start[i];
    for (const auto& r : reports) last = std::max(last, r.written[i]);
    commit.push_back(ms(zero.end[i] - zero.start[i]));
    written.push_back(ms(last - zero.start[i]));
    rest.push_back(ms(zero.end[i] - last));
  }
  return {median(commit), median(written), median(rest), zero.prune_ms};
}

// `run.world` rank processes; commit < 0 on a failure.
Figures measure(const Run& run) {
  std::filesystem::remove_all(run.root);
  int ports[2], results[2];
  if (pipe(ports) != 0 || pipe(results) != 0) return {};
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
  std::vector<Report> reports(static_cast<size_t>(run.world));
  for (auto& r : reports) ok = ok && read(results[0], &r, sizeof r) == sizeof r;
  for (pid_t pid : pids) {
    int status = 0;
    ok = waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0 && ok;
  }
  for (int fd : {ports[0], ports[1], results[0]}) close(fd);
  return ok ? summarize(reports, run.rounds) : Figures{};
}

}  // namespace

int main(int argc, char** argv) {
  hydro_bench::exit_on_options(
      argc, argv,
      "usage: hydro-bench-commit-scale [ROOT] [ROUNDS]\n  sync_all commits against the number of ranks, 2 to 32 "
      "processes here (default ROOT /tmp/hydro-bench-commit-scale, ROUNDS 9; needs munged)");
  const std::string root = argc > 1 ? argv[1] : "/tmp/hydro-bench-commit-scale";
  const int rounds = std::clamp(argc > 2 ? std::atoi(argv[2]) : 9, 1, kMaxRounds);
  const size_t small = 4 << 10, large = 4 << 20;
  std::printf("sync_all commit, ranks as processes on this machine, medians of %d commits (ms)\n", rounds);
  std::printf("%5s | %9s %7s | %9s %7s %13s %9s %7s | %9s\n", "", "4 KiB", "", "4 MiB", "", "", "", "", "4 MiB");
  std::printf("%5s | %9s %7s | %9s %7s %13s %9s %7s | %9s\n", "ranks", "commit", "vs N=2", "commit", "vs N=2",
              "last written", "the rest", "vs N=2", "prune");
  Figures s2, l2;
  int generation = 0;
  for (int world : {2, 4, 8, 16, 32}) {
    Figures s = measure({root, "job bench step " + std::to_string(++generation), world, small, rounds});
    Figures l = measure({root, "job bench step " + std::to_string(++generation), world, large, rounds});
    if (s.commit < 0 || l.commit < 0) return std::fprintf(stderr, "%d ranks failed (is munged running?)\n", world), 1;
    if (world == 2) s2 = s, l2 = l;
    std::printf("%5d | %9.1f %6.2fx | %9.1f %6.2fx %13.1f %9.1f %6.2fx | %9.1f\n", world, s.commit,
                s.commit / s2.commit, l.commit, l.commit / l2.commit, l.written, l.rest, l.rest / l2.rest, l.prune);
  }
  std::filesystem::remove_all(root);
  return 0;
}
