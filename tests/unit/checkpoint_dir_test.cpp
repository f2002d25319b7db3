// The checkpoint-directory protocol: commit, `latest`, keep_last, verification, and faults.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <thread>
#include <vector>

#include "fault_fs.h"
#include "hydro/atomic_file.h"
#include "hydro/checkpoint_dir.h"
#include "hydro/manifest.h"

namespace hydro {
namespace {

using test::FaultFs;
using test::TempDir;
using test::write_checkpoint;

std::string latest_of(const std::string& root) {
  std::string t;
  EXPECT_TRUE(posix_fs().read_link(root + "/latest", &t).ok());
  return t;
}

std::vector<std::string> entries(const std::string& root) {
  std::vector<std::string> names;
  EXPECT_TRUE(posix_fs().list_dir(root, &names).ok());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(CheckpointDir, CommitCreatesStepDirectoryManifestAndLatest) {
  TempDir t;
  CheckpointDir dir(t.path + "/ck");
  ASSERT_TRUE(dir.open().ok());
  ASSERT_TRUE(write_checkpoint(dir, 7).ok());
  EXPECT_EQ(latest_of(dir.root()), "step-000000000007");
  Manifest m;
  Status s = dir.verify("step-000000000007", &m);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(m.step, 7);
  ASSERT_EQ(m.files.size(), 2u);
  EXPECT_EQ(m.files[0].name, "model.pt");
  EXPECT_EQ(m.files[0].size, 8u);
  EXPECT_EQ(entries(dir.root()), (std::vector<std::string>{"latest", "step-000000000007"}));
}

TEST(CheckpointDir, LatestMovesToTheNewestCommit) {
  TempDir t;
  CheckpointDir dir(t.path);
  ASSERT_TRUE(dir.open().ok());
  for (int step : {10, 20, 30}) ASSERT_TRUE(write_checkpoint(dir, step).ok());
  EXPECT_EQ(latest_of(t.path), "step-000000000030");
  std::optional<CheckpointInfo> found;
  std::vector<std::string> warnings;
  ASSERT_TRUE(dir.latest_valid(&found, &warnings).ok());
  ASSERT_TRUE(found);
  EXPECT_EQ(found->step, 30);
  EXPECT_TRUE(warnings.empty());
}

TEST(CheckpointDir, EmptyDirectoryHasNoLatest) {
  TempDir t;
  CheckpointDir dir(t.path);
  ASSERT_TRUE(dir.open().ok());
  std::optional<CheckpointInfo> found;
  std::vector<std::string> warnings;
  ASSERT_TRUE(dir.latest_valid(&found, &warnings).ok());
  EXPECT_FALSE(found);
}

TEST(CheckpointDir, KeepLastKeepsTheNewestAndNeverLatest) {
  TempDir t;
  CheckpointDir dir(t.path, posix_fs(), /*keep_last=*/1);
  ASSERT_TRUE(dir.open().ok());
  for (int step = 1; step <= 4; ++step) {
    ASSERT_TRUE(write_checkpoint(dir, step).ok());
    EXPECT_EQ(entries(t.path), (std::vector<std::string>{"latest", CheckpointDir::name_for(step)}));
  }
}

TEST(CheckpointDir, RecommittingAStepReplacesIt) {
  TempDir t;
  CheckpointDir dir(t.path);
  ASSERT_TRUE(dir.open().ok());
  ASSERT_TRUE(write_checkpoint(dir, 5, "first").ok());
  ASSERT_TRUE(write_checkpoint(dir, 5, "second").ok());
  std::string bytes;
  ASSERT_TRUE(posix_fs().read_file(t.path + "/step-000000000005/model.pt", &bytes).ok());
  EXPECT_EQ(bytes, "second5");
  EXPECT_EQ(entries(t.path), (std::vector<std::string>{"latest", "step-000000000005"}));
}

TEST(CheckpointDir, FlippedByteIsDetectedNamingTheFileAndFallsBack) {
  TempDir t;
  CheckpointDir dir(t.path);
  ASSERT_TRUE(dir.open().ok());
  ASSERT_TRUE(write_checkpoint(dir, 1).ok());
  ASSERT_TRUE(write_checkpoint(dir, 2).ok());
  const std::string file = t.path + "/step-000000000002/optimizer.pt";
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(500);
    f.put('X');
  }
  Status s = dir.verify("step-000000000002");
  EXPECT_EQ(s.code(), Code::corruption);
  EXPECT_EQ(s.message(), "checkpoint file " + file + ": checksum does not match the manifest");
  std::optional<CheckpointInfo> found;
  std::vector<std::string> warnings;
  ASSERT_TRUE(dir.latest_valid(&found, &warnings).ok());
  ASSERT_TRUE(found);
  EXPECT_EQ(found->step, 1);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_EQ(warnings[0], s.message());
  EXPECT_EQ(warnings[1], "falling back to " + t.path + "/step-000000000001");
}

TEST(CheckpointDir, TruncatedFileIsDetectedNamingTheFile) {
  TempDir t;
  CheckpointDir dir(t.path);
  ASSERT_TRUE(dir.open().ok());
  ASSERT_TRUE(write_checkpoint(dir, 3).ok());
  const std::string file = t.path + "/step-000000000003/optimizer.pt";
  ASSERT_EQ(::truncate(file.c_str(), 10), 0);
  Status s = dir.verify("step-000000000003");
  EXPECT_EQ(s.code(), Code::corruption);
  EXPECT_EQ(s.message(), "checkpoint file " + file + ": size 10, manifest says 1000 (truncated?)");
}

TEST(CheckpointDir, MissingManifestIsCorruption) {
  TempDir t;
  CheckpointDir dir(t.path);
  ASSERT_TRUE(dir.open().ok());
  ASSERT_TRUE(write_checkpoint(dir, 3).ok());
  ASSERT_EQ(::unlink((t.path + "/step-000000000003/manifest.json").c_str()), 0);
  Status s = dir.verify("step-000000000003");
  EXPECT_EQ(s.code(), Code::corruption);
  EXPECT_NE(s.message().find("missing or unreadable manifest"), std::string::npos) << s.message();
}

TEST(CheckpointDir, DanglingLatestFallsBackToNewestValid) {
  TempDir t;
  CheckpointDir dir(t.path);
  ASSERT_TRUE(dir.open().ok());
  ASSERT_TRUE(write_checkpoint(dir, 1).ok());
  ASSERT_TRUE(write_checkpoint(dir, 2).ok());
  ASSERT_TRUE(posix_fs().remove_tree(t.path + "/step-000000000002").ok());
  std::optional<CheckpointInfo> found;
  std::vector<std::string> warnings;
  ASSERT_TRUE(dir.latest_valid(&found, &warnings).ok());
  ASSERT_TRUE(found);
  EXPECT_EQ(found->step, 1);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_EQ(warnings[0], "checkpoint " + t.path + "/step-000000000002: missing or unreadable manifest: open " + t.path +
                             "/step-000000000002/manifest.json: No such file or directory");
  EXPECT_EQ(warnings[1], "falling back to " + t.path + "/step-000000000001");
}

TEST(CheckpointDir, RelativeRootIsRefused) {
  CheckpointDir dir("relative/ck");
  Status s = dir.open();
  EXPECT_EQ(s.code(), Code::invalid_argument);
  EXPECT_EQ(s.message(), "checkpoint directory must be an absolute path, got 'relative/ck'");
}

TEST(CheckpointDir, BadFileNamesAreRefused) {
  TempDir t;
  CheckpointDir dir(t.path);
  ASSERT_TRUE(dir.open().ok());
  std::unique_ptr<CheckpointWriter> w;
  ASSERT_TRUE(dir.begin(1, &w).ok());
  for (const char* bad : {"", "../x", "a/b", ".hidden", "manifest.json"})
    EXPECT_EQ(w->write_file(bad, "x").code(), Code::invalid_argument) << bad;
}

TEST(CheckpointDir, FailedWriteIsNotCommittedAndLeavesNothingBehind) {
  TempDir t;
  FaultFs fs;
  CheckpointDir dir(t.path, fs);
  ASSERT_TRUE(dir.open().ok());
  ASSERT_TRUE(write_checkpoint(dir, 1).ok());
  fs.fail_write_at = fs.writes + 1;  // the second file of the next checkpoint: ENOSPC
  Status s = write_checkpoint(dir, 2);
  EXPECT_EQ(s.code(), Code::io);
  EXPECT_NE(s.message().find("No space left on device"), std::string::npos) << s.message();
  EXPECT_EQ(latest_of(t.path), "step-000000000001");
  EXPECT_EQ(entries(t.path), (std::vector<std::string>{"latest", "step-000000000001"}));
  ASSERT_TRUE(write_checkpoint(dir, 3).ok()) << "training goes on after a full disk";
  EXPECT_EQ(latest_of(t.path), "step-000000000003");
}

TEST(CheckpointDir, FailedFileFsyncIsNotCommittedAndNotRetried) {
  TempDir t;
  FaultFs fs;
  CheckpointDir dir(t.path, fs);
  ASSERT_TRUE(dir.open().ok());
  ASSERT_TRUE(write_checkpoint(dir, 1).ok());
  fs.fail_sync_at = fs.syncs;
  Status s = write_checkpoint(dir, 2);
  EXPECT_EQ(s.code(), Code::io);
  EXPECT_EQ(fs.syncs, fs.fail_sync_at + 1) << "a failed fsync must not be retried";
  EXPECT_EQ(latest_of(t.path), "step-000000000001");
}

// One file goes to disk while the next is filled: the fsyncs come after the last file, all of them
// before the manifest that names the files.
TEST(CheckpointDir, FilesAreFsyncedTogetherAfterTheLastAndBeforeTheManifest) {
  TempDir t;
  FaultFs fs;
  CheckpointDir dir(t.path, fs);
  ASSERT_TRUE(dir.open().ok());
  int syncs_at_manifest = -1;
  fs.on_new_writable = [&](const std::string& path) {
    if (path.size() >= 14 && path.compare(path.size() - 14, 14, "/manifest.json") == 0) syncs_at_manifest = fs.syncs;
  };
  std::unique_ptr<CheckpointWriter> w;
  ASSERT_TRUE(dir.begin(1, &w).ok());
  ASSERT_TRUE(w->write_file("model.pt", "weights").ok());
  ASSERT_TRUE(w->write_file("optimizer.pt", "moments").ok());
  EXPECT_EQ(fs.syncs, 0) << "finishing a file starts its writeback; the fsync waits for the commit";
  ASSERT_TRUE(w->commit().ok());
  EXPECT_EQ(syncs_at_manifest, 2) << "both files fsynced before the manifest is written";
  EXPECT_EQ(fs.syncs, 3) << "then the manifest";
  Manifest m;
  ASSERT_TRUE(dir.verify("step-000000000001", &m).ok());
  EXPECT_EQ(m.files.size(), 2u);
}

TEST(CheckpointDir, ManyFilesAreFsyncedInBatchesSoFewStayOpen) {
  TempDir t;
  FaultFs fs;
  CheckpointDir dir(t.path, fs);
  ASSERT_TRUE(dir.open().ok());
  std::unique_ptr<CheckpointWriter> w;
  ASSERT_TRUE(dir.begin(1, &w).ok());
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(w->write_file("f" + std::to_string(i), "x").ok());
  EXPECT_EQ(fs.syncs, 64) << "a batch of 64 open files is fsynced and closed; the rest wait for the commit";
  ASSERT_TRUE(w->commit().ok());
  EXPECT_EQ(fs.syncs, 101);
  ASSERT_TRUE(dir.verify("step-000000000001").ok());
}

TEST(CheckpointDir, FsyncFailureAfterTheRenameIsDurabilityUncertain) {
  TempDir t;
  FaultFs fs;
  CheckpointDir dir(t.path, fs);
  ASSERT_TRUE(dir.open().ok());
  // Directory fsyncs of a commit: staging, root after the rename, root after `latest`.
  fs.fail_dir_sync_at = fs.dir_syncs + 1;
  Status s = write_checkpoint(dir, 1);
  EXPECT_EQ(s.code(), Code::durability_uncertain);
  EXPECT_TRUE(posix_fs().exists(t.path + "/step-000000000001"));
}

TEST(CheckpointDir, OpenRemovesStagingOfDeadWriters) {
  TempDir t;
  ASSERT_TRUE(posix_fs().make_dir(t.path + "/.tmp-step-000000000009.999999999.0", 0700).ok());
  const std::string live = t.path + "/.tmp-step-000000000009." + std::to_string(::getpid()) + ".0";
  ASSERT_TRUE(posix_fs().make_dir(live, 0700).ok());
  CheckpointDir dir(t.path);
  ASSERT_TRUE(dir.open().ok());
  EXPECT_FALSE(posix_fs().exists(t.path + "/.tmp-step-000000000009.999999999.0"));
  EXPECT_TRUE(posix_fs().exists(live)) << "a live writer's staging is left alone";
}

TEST(CheckpointDir, NamesRoundTrip) {
  int64_t step = -1;
  EXPECT_EQ(CheckpointDir::name_for(42), "step-000000000042");
  EXPECT_TRUE(CheckpointDir::parse_name("step-000000000042", &step));
  EXPECT_EQ(step, 42);
  EXPECT_FALSE(CheckpointDir::parse_name("step-42", &step));
  EXPECT_FALSE(CheckpointDir::parse_name("latest", &step));
  EXPECT_FALSE(CheckpointDir::parse_name("step-00000000004x", &step));
  // From step 10^12 on the name is wider, and still the step's (fuzz.checkpoint_name).
  for (int64_t big : {int64_t{1000000000000}, int64_t{INT64_MAX}}) {
    EXPECT_TRUE(CheckpointDir::parse_name(CheckpointDir::name_for(big), &step)) << big;
    EXPECT_EQ(step, big);
  }
  EXPECT_FALSE(CheckpointDir::parse_name("step-0000000000042", &step)) << "not the name of step 42";
  EXPECT_FALSE(CheckpointDir::parse_name("step-9223372036854775808", &step)) << "past int64";
}

}  // namespace
}  // namespace hydro

namespace hydro {
namespace {

TEST(CheckpointDir, StreamedFileIsHashedAsItIsWritten) {
  test::TempDir t;
  CheckpointDir dir(t.path);
  ASSERT_TRUE(dir.open().ok());
  std::unique_ptr<CheckpointWriter> w;
  ASSERT_TRUE(dir.begin(1, &w).ok());
  std::unique_ptr<FileSink> sink;
  ASSERT_TRUE(w->open_file("big.pt", &sink).ok());
  std::string chunk(4096, 'c');
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(sink->append(chunk.data(), chunk.size()).ok());
  ASSERT_TRUE(sink->finish().ok());
  EXPECT_EQ(sink->finish().code(), Code::invalid_argument);
  EXPECT_EQ(w->write_file("big.pt", "again").message(), "checkpoint file 'big.pt' written twice");
  ASSERT_TRUE(w->commit().ok());
  Manifest m;
  ASSERT_TRUE(dir.verify("step-000000000001", &m).ok());
  ASSERT_EQ(m.files.size(), 1u);
  EXPECT_EQ(m.files[0].size, 409600u);
}

TEST(CheckpointDir, AbandonedWriterLeavesNothingBehind) {
  test::TempDir t;
  CheckpointDir dir(t.path);
  ASSERT_TRUE(dir.open().ok());
  std::unique_ptr<CheckpointWriter> w;
  ASSERT_TRUE(dir.begin(2, &w).ok());
  ASSERT_TRUE(w->write_file("a.pt", "a").ok());
  w.reset();  // abandoned: the staging directory goes, `latest` never existed
  EXPECT_EQ(entries(t.path), std::vector<std::string>{});
}

}  // namespace
}  // namespace hydro

namespace hydro {
namespace {

TEST(CheckpointDir, ForceSaveCheckpointsAreKeptAndDoNotCountTowardKeepLast) {
  test::TempDir t;
  CheckpointDir dir(t.path, posix_fs(), /*keep_last=*/2);
  ASSERT_TRUE(dir.open().ok());
  for (int step = 1; step <= 6; ++step) {
    std::unique_ptr<CheckpointWriter> w;
    ASSERT_TRUE(dir.begin(step, &w).ok());
    ASSERT_TRUE(w->write_file("model.pt", "w" + std::to_string(step)).ok());
    w->set_keep(step == 2 || step == 3);
    ASSERT_TRUE(w->commit().ok());
  }
  std::vector<std::string> names;
  for (const auto& c : dir.list()) names.push_back(c.name);
  EXPECT_EQ(names, (std::vector<std::string>{CheckpointDir::name_for(2), CheckpointDir::name_for(3),
                                             CheckpointDir::name_for(5), CheckpointDir::name_for(6)}));
  Manifest m;
  ASSERT_TRUE(dir.verify(CheckpointDir::name_for(2), &m).ok());
  EXPECT_TRUE(m.keep);
  ASSERT_TRUE(dir.verify(CheckpointDir::name_for(6), &m).ok());
  EXPECT_FALSE(m.keep);
}

TEST(AtomicFile, ReplacesTheFileWholeAndLeavesNoTemporary) {
  test::TempDir t;
  const std::string path = t.path + "/state.bin";
  auto write = [&](const std::string& bytes) {
    return write_file_atomic(path, [&](WritableFile& f) { return f.append(bytes.data(), bytes.size()); });
  };
  ASSERT_TRUE(write("first").ok());
  ASSERT_TRUE(write("second").ok());
  std::string now;
  ASSERT_TRUE(posix_fs().read_file(path, &now).ok());
  EXPECT_EQ(now, "second");
  EXPECT_EQ(entries(t.path), std::vector<std::string>{"state.bin"});
}

TEST(AtomicFile, AFailedWriteLeavesTheOldFileAndNoTemporary) {
  test::TempDir t;
  const std::string path = t.path + "/state.bin";
  ASSERT_TRUE(write_file_atomic(path, [](WritableFile& f) { return f.append("old", 3); }).ok());
  test::FaultFs faults;
  faults.fail_write_at = 0;
  Status s = write_file_atomic(
      path, [](WritableFile& f) { return f.append("new", 3); }, faults);
  EXPECT_EQ(s.code(), Code::io);
  std::string now;
  ASSERT_TRUE(posix_fs().read_file(path, &now).ok());
  EXPECT_EQ(now, "old");
  EXPECT_EQ(entries(t.path), std::vector<std::string>{"state.bin"});
}

TEST(AtomicFile, BadPathsAreRefusedNamingThePath) {
  EXPECT_EQ(write_file_atomic("state.bin", [](WritableFile&) { return Status::OK(); }).message(),
            "atomic save: 'state.bin' is not an absolute file path");
  EXPECT_EQ(write_file_atomic("/tmp/", [](WritableFile&) { return Status::OK(); }).message(),
            "atomic save: '/tmp/' is not an absolute file path");
  std::string missing = write_file_atomic("/nonexistent-dir/x", [](WritableFile&) { return Status::OK(); }).message();
  EXPECT_EQ(missing.rfind("create /nonexistent-dir/.x.tmp-" + std::to_string(::getpid()) + ".", 0), 0u) << missing;
  EXPECT_NE(missing.find(": No such file or directory"), std::string::npos) << missing;
}

}  // namespace
}  // namespace hydro
