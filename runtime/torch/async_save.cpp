// Async mode's saves: the training thread captures the state into reused host copies, and the
// background thread writes and commits it (alone, or with the other ranks: every_rank_writes()).
// HYDRO_ASYNC_COPY=behind (copy_behind()): save() returns once captured, the copies still running.
#include <future>

#include <unistd.h>

#include "compute_threads.h"
#include "hydro/checkpoint_dir.h"
#include "hydro/checkpoint_group.h"
#include "hydro/log.h"
#include "hydro/runtime.h"
#include "snapshot.h"
#include "tracked.h"

namespace hydro {

// One async save as the training thread captured it, for the background thread to write.
struct Runtime::AsyncSave {
  struct Item {
    std::string file;
    Captured captured;
  };
  int64_t step = 0;
  bool keep = false;
  int64_t epoch = 0;
  ComputeThreads threads;
  std::vector<Item> items;
  Composer compose;

  Status failure;  // the capture failed: this rank's part of the save fails with it

  Status write(CheckpointWriter& w) const {
    HYDRO_RETURN_IF_ERROR(failure);
    w.set_threads(threads.aten, threads.blas);
    try {
      for (const auto& it : items) HYDRO_RETURN_IF_ERROR(write_captured(w, it.file, it.captured));
    } catch (const std::exception& e) {
      return Status::io(std::string("serializing the snapshot: ") + e.what());
    }
    return Status::OK();
  }
};

// The training thread copies the state (into reused host buffers) and goes on; this thread writes.
// With copy_behind(), the copies go on after this returns: the background job makes them first.
std::string Runtime::save_async(int64_t step, bool keep_always) {
  auto save = std::make_shared<AsyncSave>();
  save->step = step;
  save->keep = keep_always;
  save->epoch = epoch_;
  save->threads = compute_threads();
  save->compose = dcp_metadata_;
  std::shared_ptr<std::promise<void>> copied;
  auto start = [this, save, saver = saver_.get()](std::shared_ptr<std::promise<void>> copied) {
    persist_.start([this, save, saver, copied] {
      if (copied) finish_copies(*save, *copied);
      finish_async(save->step, saver ? persist_in_group(*save, saver) : persist_alone(*save));
    });
  };
  try {
    TensorPool::Capturing capturing(*pool_);
    for (const auto& t : tracked_) save->items.push_back({t.name + ".pt", t.capture(*pool_)});
    save->items.push_back({"rng.pt", rng_item().capture(*pool_)});
    if (copy_behind_) {
      capturing.leave();  // the copies run on: wait_copies() and the background job wait for them
      copied = std::make_shared<std::promise<void>>();
      std::lock_guard<std::mutex> lock(copies_mu_);
      copies_ = copied->get_future().share();
      copies_pid_ = ::getpid();
    } else {
      capturing.finish();  // every copy is done before training goes on
    }
  } catch (const std::exception& e) {
    // In a group this rank's part still runs, and fails at once: its peers are told, and the ranks'
    // saves stay in step (save_in_step).
    if (saver_) {
      save->items.clear();
      save->failure = Status::io(std::string("capturing the state: ") + e.what());
      start(nullptr);
    }
    throw;
  }
  try {
    start(copied);
  } catch (...) {  // no background thread: the copies are made here, and nobody waits for them
    if (copied) finish_copies(*save, *copied);
    throw;
  }
  return settings_.checkpoint_dir + "/" + CheckpointDir::name_for(step);
}

void Runtime::finish_copies(AsyncSave& save, std::promise<void>& copied) {
  try {
    pool_->finish();
  } catch (const std::exception& e) {
    save.failure = Status::io(std::string("copying the state: ") + e.what());
  }
  copied.set_value();
}

// On the thread of an optimizer step (the binding's hook), which may not be the one that saved.
// A forked child (a DataLoader worker that steps an optimizer, a fork to evaluate) has the copies'
// future, but not the helper thread that would make it ready, nor the lock's holder at the fork.
void Runtime::wait_copies() {
  if (copies_pid_ != 0 && copies_pid_ != ::getpid()) return;
  std::shared_future<void> copies;
  {
    std::lock_guard<std::mutex> lock(copies_mu_);
    copies = copies_;
  }
  if (copies.valid()) copies.wait();
}

// Async saves of every rank (every_rank_writes()): each rank enters every voted save, whatever
// failed before, or the ranks' saves would fall out of step. The previous save's failure is thrown
// once this one is started, and a failed capture makes this rank's part of this save fail (its peers
// learn it at once, not after the store timeout).
std::string Runtime::save_in_step(int64_t step, bool keep_always) {
  std::string previous;
  try {
    wait_idle();
  } catch (const std::exception& e) {
    previous = e.what();
  }
  std::string path = save_async(step, keep_always);
  if (!previous.empty()) throw std::runtime_error(previous);
  return path;
}

// This rank writes the whole checkpoint: one rank, or rank 0 for ranks that all hold the same state.
Status Runtime::persist_alone(const AsyncSave& save) {
  CheckpointDir dir(settings_.checkpoint_dir, fs_, settings_.keep_last);  // commit() also prunes
  if (settings_.world_size > 1 && !resumed_name_.empty()) dir.protect(resumed_name_);
  Status st = dir.open();
  std::unique_ptr<CheckpointWriter> writer;
  if (st.ok()) st = dir.begin(save.step, &writer);
  if (st.ok()) {
    writer->set_keep(save.keep);
    writer->set_epoch(save.epoch);
    st = save.write(*writer);
  }
  if (st.ok() && save.compose) st = writer->compose_dcp_metadata(save.compose);
  if (st.ok()) st = writer->commit();
  return st;
}

// Every rank writes its own shard and the group commits them as one checkpoint, as in the sync
// modes, on the saves' own connection (every_rank_writes()). The committer prunes once it has told
// the others.
Status Runtime::persist_in_group(const AsyncSave& save, CheckpointGroup* saver) {
  CheckpointDir dir(settings_.checkpoint_dir, fs_, settings_.keep_last);
  return saver->save(
      dir, save.step, save.keep, save.epoch, [&save](CheckpointWriter& w) { return save.write(w); }, nullptr,
      save.compose ? &save.compose : nullptr);
}

void Runtime::finish_async(int64_t step, const Status& st) {
  if (Status s = warn_if_durability_uncertain(st); !s.ok()) {
    persist_error_ = s.message();
    return;
  }
  async_committed_ = true;
  if (!saver_ || settings_.rank == 0) log("async checkpoint of step " + std::to_string(step) + " committed");
}

}  // namespace hydro
