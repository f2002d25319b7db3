// hydro-example-train: the whole stack on a dataset of sample files. A JobRunner runs epochs over
// the files, in the order PyTorch's DistributedSampler would give, with dropout (so the RNG state
// matters), and keeps per-epoch metrics across requeues. Under `srun -n N` the ranks train
// data-parallel over a Gloo process group. Lines marked "hydro" are what a user adds.
//
//   hydro-example-train --make-data 512 --data DIR     writes 512 seeded sample files, then exits
//   hydro-example-train --data DIR --epochs 4          trains; prints epoch means and weights_digest
#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "hydro/distributed.h"      // ranks
#include "hydro/job.h"              // hydro
#include "hydro/runtime.h"          // hydro
#include "hydro/sampler.h"          // hydro
#include "hydro/sharded_dataset.h"  // hydro
#include "weights_digest.h"

namespace {

// Sample i: 64 features from a generator seeded by (seed, i), labelled by a fixed teacher.
int make_data(const std::string& dir, int64_t n, int64_t seed) {
  std::filesystem::create_directories(dir);
  auto teacher_gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  torch::Tensor teacher = torch::randn({64, 10}, teacher_gen);
  for (int64_t i = 0; i < n; ++i) {
    auto g = at::make_generator<at::CPUGeneratorImpl>(seed * 1000003 + i + 1);
    torch::Tensor x = torch::randn({64}, g);
    torch::Tensor y = torch::matmul(x, teacher).argmax();
    char name[32];
    std::snprintf(name, sizeof name, "/%08" PRId64 ".pt", i);
    torch::save(std::vector<torch::Tensor>{x, y}, dir + name);
  }
  std::printf("wrote %" PRId64 " samples to %s\n", n, dir.c_str());
  return 0;
}

struct Options {
  std::string data;
  int64_t make = 0, epochs = 3, batch = 16, seed = 1234, log_every = 10, step_ms = 0, pg_timeout = 1800;
};

// The training: a model, its optimizer and the sampler, tracked by hydro and run by its JobRunner.
// Lines marked "hydro" are what hydro adds; "ranks", what several ranks add.
int train(const Options& o) {
  std::shared_ptr<hydro::Group> group;
  int world = 1, rank = 0;
  if (hydro::DistEnv env; hydro::DistEnv::from_env(&env).ok() && env.world_size > 1) {
    group = hydro::join_gloo_group(std::chrono::seconds(o.pg_timeout));  // ranks
    world = group->size();
    rank = group->rank();
  }
  torch::manual_seed(o.seed);
  torch::nn::Sequential model(torch::nn::Linear(64, 128), torch::nn::ReLU(), torch::nn::Dropout(0.2),
                              torch::nn::Linear(128, 10));
  if (group) hydro::broadcast_parameters(*group, *model);  // ranks
  torch::manual_seed(o.seed + 1 + rank);                   // each rank its own dropout stream
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  auto dataset = hydro::ShardedFileDataset(o.data).map(torch::data::transforms::Stack<>());
  hydro::InterruptibleDistributedSampler sampler(*dataset.size(), world, rank, o.seed);

  hydro::Runtime hydro;                 // hydro
  hydro.track("model", *model);         // hydro
  hydro.track("optimizer", optimizer);  // hydro
  hydro.track("sampler", sampler);      // hydro
  hydro::Job job;                       // hydro
  // ranks: the group's own timeout, watched in running time (a hold of any length is no hang)
  if (group) hydro.watch_collectives(group->timeout);
  job.steps_per_epoch = static_cast<int64_t>((sampler.size() + world - 1) / world + o.batch - 1) / o.batch;
  job.epoch = [&](int64_t epoch, hydro::JobContext& ctx) {
    sampler.set_epoch(epoch);  // a new shuffle each epoch; a resumed epoch keeps its position
    auto loader = torch::data::make_data_loader(dataset, sampler, torch::data::DataLoaderOptions(o.batch).workers(0));
    for (auto& b : *loader) {
      optimizer.zero_grad();
      torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(b.data), b.target);
      loss.backward();
      if (group) hydro::average_gradients(*group, *model);  // ranks
      optimizer.step();
      ctx.metrics().add("loss", loss.item<double>());
      if ((ctx.step() + 1) % o.log_every == 0)
        std::printf("step %" PRId64 " loss %.6f\n", ctx.step() + 1, loss.item<double>());
      std::fflush(stdout);
      if (o.step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(o.step_ms));
      if (!ctx.step_end(ctx.epoch_step() + 1)) return;  // hydro: checkpointed; run me again
    }
  };
  job.epoch_limiter(o.epochs);
  hydro::JobRunner runner(hydro);  // hydro
  if (group)
    runner.reduce_metrics_with([&](const hydro::MetricsTracker& m) { return hydro::all_reduce_metrics(*group, m); });
  int rc = runner.run(job);  // hydro: 0, or kExitRequeue after a checkpoint on SIGTERM
  if (rc != 0) return rc;
  for (const auto& e : runner.history())
    std::printf("epoch %" PRId64 " loss_mean %.17g steps %" PRId64 "\n", e.epoch, e.metrics.at("loss").mean(),
                e.metrics.at("loss").count);
  std::printf("weights_digest=%016" PRIx64 "\n", weights_digest(*model));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "hydro-example-train: epochs over a folder of sample files under hydro's JobRunner.\n"
      "Prints 'step N loss X', 'epoch E loss_mean M' and finally 'weights_digest=<hex>'.",
      "hydro-example-train"};
  Options o;
  app.add_option("--data", o.data, "Folder of sample files (torch::save of {x, y})")->required();
  app.add_option("--make-data", o.make, "Write this many seeded sample files into --data, then exit");
  app.add_option("--epochs", o.epochs, "Epochs")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--batch", o.batch, "Batch size per rank")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--seed", o.seed, "Seed for the weights, the data and the shuffle")->capture_default_str();
  app.add_option("--log-every", o.log_every, "Print the loss every N steps")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--step-ms", o.step_ms, "Sleep this long after each step (tests: makes a run last)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--pg-timeout", o.pg_timeout, "With several ranks: seconds a collective may wait")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (o.make > 0) return make_data(o.data, o.make, o.seed);
  try {
    return train(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hydro-example-train: %s\n", e.what());
    return 1;
  }
}
