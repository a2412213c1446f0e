// outputs.h - all-or-nothing output files for one CLI run.
//
// Every output (--json, --csv, --html, --out, ...) is first written to a temporary file
// beside its destination; only when all of them were written are they renamed into place,
// so a failure (an unwritable --csv after a good --json, a full disk, an exception) leaves
// no new output file and every earlier file untouched. Destinations replaced by the final
// renames are kept as hard-linked backups until all renames succeeded, and restored if one
// fails. Destinations that exist and are not regular files (/dev/stdout, a FIFO) are written
// directly at commit time: they cannot be replaced by a rename. The path "-" is standard
// output (text outputs only, at most one of them per run), as in most Unix tools.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace neusight::cli {

class OutputSet {
 public:
  OutputSet() = default;
  OutputSet(const OutputSet&) = delete;
  OutputSet& operator=(const OutputSet&) = delete;
  ~OutputSet();  // removes every temporary file not committed

  // Writes `content` to a temporary file for `path` now. Throws RuntimeError naming `path`
  // (directory, missing folder, no permission, write failure).
  void add_text(const std::string& path, const std::string& content);
  // Calls `write(tmp)` to write the output for `path` to the temporary path `tmp` (same
  // folder as `path`, so relative references such as external-data locations resolve).
  // A RuntimeError from `write` is reported with `path`.
  void add(const std::string& path, const std::function<void(const std::string& tmp)>& write);
  // Renames every temporary file onto its destination. Throws RuntimeError naming the
  // destination that failed, after restoring the ones already replaced.
  void commit();
  // Whether an output goes to standard output ("-"): the caller then prints no table there.
  bool writes_stdout() const { return to_stdout_; }

 private:
  struct Staged {
    std::string path;
    std::string tmp;
    std::string direct;  // content for a non-regular destination (written at commit)
    bool is_direct = false;
  };
  std::string make_temp(const std::string& path, bool& direct);
  std::vector<Staged> staged_;
  bool to_stdout_ = false;
};

}  // namespace neusight::cli
