// hydro-example-loop: a deterministic libtorch training loop on seeded synthetic data.
// The lines marked "hydro" are all a user adds to their own loop. Under `srun -n N` (N > 1) the
// ranks train data-parallel over a Gloo process group (the lines marked "ranks").
#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include <cinttypes>
#include <cstdio>
#include <optional>
#include <thread>

#include "hydro/distributed.h"  // ranks
#include "hydro/log.h"
#include "hydro/runtime.h"  // hydro
#include "hydro/watchdog_client.h"
#include "weights_digest.h"

namespace {

// With several ranks each rank draws its own batches from a generator of (seed, step, rank): the
// data then needs no per-rank state in the checkpoint, which rank 0 writes for every rank.
at::Generator batch_generator(int64_t seed, int64_t step, int rank) {
  return at::detail::createCPUGenerator(static_cast<uint64_t>(seed) * 1000003u + static_cast<uint64_t>(step) * 1009u +
                                        static_cast<uint64_t>(rank));
}

struct Options {
  int64_t steps = 2000, batch = 64, hidden = 512, log_every = 10, seed = 1234, step_ms = 0, pg_timeout = 1800;
  double lr = 0.01, step_timeout = 0;
};

void add_options(CLI::App& app, Options& o) {
  app.add_option("--steps", o.steps, "Training steps")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--batch", o.batch, "Batch size")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--hidden", o.hidden, "Hidden layer width")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--lr", o.lr, "Learning rate")->capture_default_str();
  app.add_option("--seed", o.seed, "Seed for the weights and the data")->capture_default_str();
  app.add_option("--step-ms", o.step_ms,
                 "Sleep this long after each step (demos and tests: makes a short run last); "
                 "the weights do not change")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--log-every", o.log_every, "Print the loss every N steps")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--step-timeout", o.step_timeout,
                 "Arm a watchdog timer of this many seconds around each step (under hydro-launch --watchdog-file: "
                 "a step that hangs longer is killed and the job requeued); 0 = none")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--pg-timeout", o.pg_timeout,
                 "With several ranks: seconds a collective may wait for a peer; a pause or suspend must be shorter")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "hydro-example-loop: an MLP trained with SGD on seeded synthetic data, under hydro.\n"
      "Prints 'step N loss X' and finally 'weights_digest=<hex>'. Checkpoints go to $HYDRO_CKPT_DIR.",
      "hydro-example-loop"};
  Options o;
  add_options(app, o);
  CLI11_PARSE(app, argc, argv);

  torch::manual_seed(o.seed);
  torch::set_num_threads(1);
  torch::nn::Sequential model(torch::nn::Linear(64, o.hidden), torch::nn::ReLU(), torch::nn::Linear(o.hidden, o.hidden),
                              torch::nn::ReLU(), torch::nn::Linear(o.hidden, 10));
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(o.lr).momentum(0.9));
  torch::Tensor teacher = torch::randn({64, 10});

  try {
    std::shared_ptr<hydro::Group> group;
    if (hydro::DistEnv env; hydro::DistEnv::from_env(&env).ok() && env.world_size > 1) {
      group = hydro::join_gloo_group(std::chrono::seconds(o.pg_timeout));  // ranks
      hydro::broadcast_parameters(*group, *model);                         // ranks
    }
    hydro::Runtime hydro;                  // hydro
    hydro.track("model", *model);          // hydro
    hydro.track("optimizer", optimizer);   // hydro
    const int64_t first = hydro.resume();  // hydro: resume
    hydro::WatchdogClient watchdog;        // hydro-launch --watchdog-file's FIFO; without one, timers do nothing

    // ranks: the group's own timeout, watched in running time (a hold of any length is no hang)
    if (group) hydro.watch_collectives(group->timeout);
    // One timer, re-armed at each step's start: armed for the whole step, the checkpoint included,
    // and at every moment between steps too, where a hang would otherwise go unseen.
    std::optional<hydro::ScopedTimer> timer;
    for (int64_t step = first; step < o.steps;) {
      if (timer)  // made at the first step, with --step-timeout only
        timer->rearm(o.step_timeout);
      else if (o.step_timeout > 0)
        timer.emplace(watchdog, "step", o.step_timeout);
      torch::Tensor x = group ? torch::randn({o.batch, 64}, batch_generator(o.seed, step, group->rank()))
                              : torch::randn({o.batch, 64});  // one rank: the data draws from the checkpointed RNG
      torch::Tensor y = torch::matmul(x, teacher).argmax(1);
      optimizer.zero_grad();
      torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(x), y);
      loss.backward();
      if (group) hydro::average_gradients(*group, *model);  // ranks
      optimizer.step();
      ++step;
      if (step == first + 1) hydro::log_line("hydro-example-loop", "first step done: step " + std::to_string(step));
      if (step % o.log_every == 0)
        std::printf("step %" PRId64 " loss %.6f\n", step, loss.item<double>()), std::fflush(stdout);
      if (o.step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(o.step_ms));
      if (!hydro.step_end(step)) return hydro::kExitRequeue;  // hydro: checkpointed, run me again
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hydro-example-loop: %s\n", e.what());
    return 1;
  }
  std::printf("weights_digest=%016" PRIx64 "\n", weights_digest(*model));
  return 0;
}
