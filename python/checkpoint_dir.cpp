// hydro._C.StagedCheckpoint, ShardFiles, resume_order and verify_share: hydro's checkpoint directory for a writer
// that Python drives (hydro.dcp, torch.distributed.checkpoint's storage layer). The coordinating
// process stages a checkpoint and commits it; every process writes its files into its shard of the
// staged directory. The protocol is hydro/checkpoint_dir.h's: hashed as written, fsynced, a
// manifest, one rename, `latest` moved.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "bindings.h"
#include "hydro/checkpoint_dir.h"
#include "hydro/log.h"
#include "hydro/manifest.h"

namespace py = pybind11;

namespace hydro {
namespace {

using FileRecord = std::tuple<std::string, uint64_t, uint64_t>;  // name, size, xxh64

// One checkpoint of `step` staged in `root`, which its creator commits once every shard's files
// are written and their records added. Dropped without commit(), it removes the staging directory.
class StagedCheckpoint {
 public:
  StagedCheckpoint(const std::string& root, int64_t step, int keep_last) : dir_(root, posix_fs(), keep_last) {
    Status s;
    {
      py::gil_scoped_release nogil;
      s = dir_.open();
      if (s.ok()) s = dir_.begin(step, &writer_);
    }
    check(s);
  }
  std::string name() const { return writer_->staging_name(); }
  void add_files(const std::vector<FileRecord>& records, int world_size) {
    std::vector<ManifestFile> files;
    for (const auto& [name, size, hash] : records) {
      if (!Manifest::valid_file_name(name) || name.find('/') == std::string::npos)
        throw py::value_error("hydro: a shard's file record names '" + name + "', outside every shard");
      files.push_back({name, size, hash});
    }
    writer_->add_files(files, /*sharded=*/true);
    writer_->set_world_size(world_size);
  }
  // DCP's index, at the checkpoint's top.
  void write_dcp_metadata(const py::bytes& data) {
    std::string bytes = data;
    Status s;
    {
      py::gil_scoped_release nogil;
      s = writer_->write_file(Manifest::kDcpMetadata, bytes);
    }
    check(s);
  }
  std::string commit(bool keep) {
    writer_->set_keep(keep);
    CheckpointInfo info;
    Status s;
    {
      py::gil_scoped_release nogil;
      s = warn_if_durability_uncertain(writer_->commit(&info));
    }
    check(s);
    return info.path;
  }

 private:
  CheckpointDir dir_;
  std::unique_ptr<CheckpointWriter> writer_;
};

// One process's files in rank-R/ of a checkpoint another process staged.
class ShardFiles {
 public:
  ShardFiles(const std::string& root, const std::string& staging, int64_t step, int rank)
      : dir_(root), subdir_(Manifest::shard_dir(rank)) {
    Status s;
    {
      py::gil_scoped_release nogil;
      s = dir_.join(staging, step, &writer_);
      if (s.ok()) s = writer_->set_subdir(subdir_);
    }
    check(s);
  }
  // The shard's directory, as the checkpoint names its files: "rank-R".
  const std::string& subdir() const { return subdir_; }
  void open(const std::string& name) {
    if (!writer_) throw py::value_error("hydro: " + name + ": the shard's files are closed");
    if (file_) throw py::value_error("hydro: " + name + ": the shard's last file is still open");
    Status s;
    {
      py::gil_scoped_release nogil;
      s = writer_->open_file(name, &file_);
    }
    check(s);
  }
  // Closes what is open now, not when Python drops this object (a failed write's traceback keeps
  // it): the file, and its write-behind thread. The staging directory stays its owner's.
  void close() {
    py::gil_scoped_release nogil;
    file_.reset();
    writer_.reset();
  }
  size_t write(const py::buffer& data) {
    py::buffer_info b = data.request();
    const size_t n = static_cast<size_t>(b.size * b.itemsize);
    if (!file_) throw py::value_error("hydro: no shard file is open");
    Status s;
    {
      py::gil_scoped_release nogil;
      s = file_->append(b.ptr, n);
    }
    check(s);
    return n;
  }
  void finish() {
    if (!file_) throw py::value_error("hydro: no shard file is open");
    Status s;
    {
      py::gil_scoped_release nogil;
      s = file_->finish();
      file_.reset();
    }
    check(s);
  }
  // fsyncs the finished files and the shard's directory; returns their records.
  std::vector<FileRecord> sync() {
    if (!writer_) throw py::value_error("hydro: the shard's files are closed");
    Status s;
    {
      py::gil_scoped_release nogil;
      s = writer_->sync_subdir();
    }
    check(s);
    std::vector<FileRecord> out;
    for (const auto& f : writer_->files()) out.emplace_back(f.name, f.size, f.xxh64);
    return out;
  }

 private:
  CheckpointDir dir_;
  std::unique_ptr<CheckpointWriter> writer_;
  std::unique_ptr<FileSink> file_;
  std::string subdir_;
};

// Runs `list(&warnings)` on `root`'s directory without the GIL, logs the warnings (a torn or
// corrupt checkpoint passed over, a bad `latest`) and raises its failure.
template <typename F>
void listing(const std::string& root, F&& list) {
  std::vector<std::string> warnings;
  Status s;
  {
    py::gil_scoped_release nogil;
    CheckpointDir dir(root);
    s = list(dir, &warnings);
  }
  for (const auto& w : warnings) log(w);
  check(s);
}

// The checkpoints of `root` in the order latest_valid() tries them, unverified: [(name, path, step)].
std::vector<std::tuple<std::string, std::string, int64_t>> resume_order(const std::string& root) {
  std::vector<CheckpointInfo> order;
  listing(root, [&](CheckpointDir& dir, std::vector<std::string>* w) { return dir.resume_order(&order, w); });
  std::vector<std::tuple<std::string, std::string, int64_t>> out;
  for (const auto& c : order) out.emplace_back(c.name, c.path, c.step);
  return out;
}

// Rank `rank` of `world` checkers' share of checkpoint `name`: the shards r = rank, rank + world, ...
// of its ranks, and the files outside every shard (a checkpoint of one writer: rank 0 checks it
// all). None when they check, else what failed.
py::object verify_share(const std::string& root, const std::string& name, int rank, int world) {
  Status s;
  {
    py::gil_scoped_release nogil;
    CheckpointDir dir(root);
    Manifest m;
    s = dir.read_manifest(name, &m);
    auto dcp = [](const ManifestFile& f) { return f.name == Manifest::kDcpMetadata; };
    if (s.ok() && std::none_of(m.files.begin(), m.files.end(), dcp))
      s = Status::not_found(root + "/" + name + " has no " + Manifest::kDcpMetadata + ": not a DCP checkpoint");
    if (s.ok() && !m.sharded && rank == 0) s = dir.verify(name);
    for (int r = rank; s.ok() && m.sharded && r < m.world_size; r += world) s = dir.verify(name, nullptr, r);
  }
  if (s.ok()) return py::none();
  return py::str(s.message());
}

}  // namespace

void bind_checkpoint_dir(py::module_& m) {
  py::class_<StagedCheckpoint, std::unique_ptr<StagedCheckpoint, ReleaseGilDelete>>(m, "StagedCheckpoint")
      .def(py::init<const std::string&, int64_t, int>(), py::arg("root"), py::arg("step"), py::arg("keep_last"))
      .def_property_readonly("name", &StagedCheckpoint::name)
      .def("add_files", &StagedCheckpoint::add_files, py::arg("records"), py::arg("world_size"))
      .def("write_dcp_metadata", &StagedCheckpoint::write_dcp_metadata, py::arg("data"))
      .def("commit", &StagedCheckpoint::commit, py::arg("keep"));
  py::class_<ShardFiles, std::unique_ptr<ShardFiles, ReleaseGilDelete>>(m, "ShardFiles")
      .def(py::init<const std::string&, const std::string&, int64_t, int>(), py::arg("root"), py::arg("staging"),
           py::arg("step"), py::arg("rank"))
      .def_property_readonly("subdir", &ShardFiles::subdir)
      .def("open", &ShardFiles::open, py::arg("name"))
      .def("write", &ShardFiles::write)
      .def("flush", [](ShardFiles&) {})
      .def("writable", [](ShardFiles&) { return true; })
      .def("finish", &ShardFiles::finish)
      .def("close", &ShardFiles::close)
      .def("sync", &ShardFiles::sync);
  m.def("resume_order", &resume_order, py::arg("root"));
  m.def("verify_share", &verify_share, py::arg("root"), py::arg("name"), py::arg("rank"), py::arg("world"));
}

}  // namespace hydro
