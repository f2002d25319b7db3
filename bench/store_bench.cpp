// The ranks' store, side by side in one run: hydro's (MUNGE-authenticated, tcp_store.h) against
// libtorch's c10d TCPStore (no authentication, what hydro used before), both over loopback in this
// process, served by a thread.
//   connect   a client's connection to the store (hydro: with its MUNGE handshake), median
//   vote      one step-end vote as CheckpointGroup::vote does it for 2 ranks: an add, then a wait
//             for the key the other rank set, median per vote
// Prints the medians and the ratio hydro / c10d. Needs munged (scripts/slurm-local munge).
// Usage: hydro-bench-store --help (the text is in main()).
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "bench_usage.h"
#include "hydro/tcp_store.h"

namespace {

using Clock = std::chrono::steady_clock;
double us_since(Clock::time_point t) { return std::chrono::duration<double, std::micro>(Clock::now() - t).count(); }
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A vote of rank 0 against a peer thread playing rank 1 through its own client.
template <typename Add, typename Set, typename Get>
std::vector<double> votes(int n, Add add, Set peer_set, Get get) {
  std::vector<double> us;
  std::thread peer([&] {
    for (int i = 0; i < n; ++i) peer_set("v/" + std::to_string(i));
  });
  for (int i = 0; i < n; ++i) {
    auto t = Clock::now();
    add("c/" + std::to_string(i));
    get("v/" + std::to_string(i));
    us.push_back(us_since(t));
  }
  peer.join();
  return us;
}

}  // namespace

int main(int argc, char** argv) {
  hydro_bench::exit_on_options(argc, argv,
                               "usage: hydro-bench-store [VOTES]\n  the ranks' store, hydro's against c10d's TCPStore: "
                               "connect and step-end vote (default VOTES 2000; needs munged)");
  const int n = argc > 1 ? std::atoi(argv[1]) : 2000;
  using namespace hydro;
  const std::string scope = "job bench step 0";
  std::unique_ptr<TcpStoreServer> server;
  Status st = TcpStoreServer::start(0, scope, &server);
  if (!st.ok()) return std::fprintf(stderr, "%s\n", st.message().c_str()), 1;
  std::vector<double> hc, tc;
  std::unique_ptr<RankStore> a, b;
  for (int i = 0; i < 50; ++i) {
    auto t = Clock::now();
    st = connect_tcp_store("127.0.0.1", server->port(), scope, std::chrono::seconds(10), &a);
    if (!st.ok()) return std::fprintf(stderr, "%s (is munged running?)\n", st.message().c_str()), 1;
    hc.push_back(us_since(t));
  }
  (void)connect_tcp_store("127.0.0.1", server->port(), scope, std::chrono::seconds(10), &b);

  c10d::TCPStoreOptions so;
  so.port = 0;
  so.isServer = true;
  so.waitWorkers = false;
  auto tserver = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", so);
  c10d::TCPStoreOptions co;
  co.port = tserver->getPort();
  co.isServer = false;
  c10::intrusive_ptr<c10d::TCPStore> ta, tb;
  for (int i = 0; i < 50; ++i) {
    auto t = Clock::now();
    ta = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", co);
    tc.push_back(us_since(t));
  }
  tb = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", co);

  int64_t v = 0;
  std::string got;
  auto hv = votes(
      n, [&](const std::string& k) { (void)a->add(k, 1, &v); }, [&](const std::string& k) { (void)b->set(k, "1"); },
      [&](const std::string& k) { (void)a->get(k, std::chrono::seconds(30), &got); });
  auto tv = votes(
      n, [&](const std::string& k) { ta->add(k, 1); },
      [&](const std::string& k) { tb->set(k, std::vector<uint8_t>{'1'}); }, [&](const std::string& k) { ta->get(k); });
  std::printf("connect: hydro (MUNGE handshake) %.0f us, c10d TCPStore %.0f us: %.1fx (median of 50)\n", median(hc),
              median(tc), median(hc) / median(tc));
  std::printf("vote (add + wait, 2 ranks): hydro %.1f us, c10d TCPStore %.1f us: %.2fx (median of %d)\n", median(hv),
              median(tv), median(hv) / median(tv), n);
  return 0;
}
