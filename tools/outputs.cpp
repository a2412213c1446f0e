// outputs.cpp - all-or-nothing output files: temporaries beside the destinations, renamed
// into place together at the end (see outputs.h).
#include "outputs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "neusight/graph.h"

namespace neusight::cli {
namespace {

constexpr const char* kStdout = "-";

std::string cannot_write(const std::string& path, int err) {
  return (path == kStdout ? std::string("standard output") : path) + ": cannot write output: " + std::strerror(err);
}

// Writes all of `data` to `fd`; false (errno set) on failure.
bool write_all(int fd, const std::string& data) {
  const char* p = data.data();
  size_t left = data.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

OutputSet::~OutputSet() {
  for (const auto& s : staged_)
    if (!s.is_direct && !s.tmp.empty()) ::unlink(s.tmp.c_str());
}

// Creates the (empty) temporary file for `path`, proving the destination folder writable.
std::string OutputSet::make_temp(const std::string& path, bool& direct) {
  direct = false;
  if (path.empty()) throw RuntimeError("output path is empty");
  if (path == kStdout) {
    if (to_stdout_) throw RuntimeError("only one output can be written to standard output ('-')");
    to_stdout_ = true;
    direct = true;
    return path;
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) throw RuntimeError(path + ": is a directory, cannot write output");
    if (!S_ISREG(st.st_mode)) {  // /dev/stdout, a FIFO: written directly at commit
      direct = true;
      return path;
    }
  }
  const std::filesystem::path p(path);
  const std::string name = p.filename().string();
  if (name.empty() || name == "." || name == "..") throw RuntimeError(path + ": not a file name, cannot write output");
  const std::filesystem::path dir = p.parent_path();
  for (int attempt = 0;; ++attempt) {
    const std::string tmp = (dir / ("." + name + ".neusight-" + std::to_string(::getpid()) + "-" +
                                    std::to_string(staged_.size()) + "-" + std::to_string(attempt) + ".tmp"))
                                .string();
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      ::close(fd);
      return tmp;
    }
    if (errno != EEXIST || attempt >= 100) throw RuntimeError(cannot_write(path, errno));
  }
}

void OutputSet::add_text(const std::string& path, const std::string& content) {
  bool direct = false;
  const std::string tmp = make_temp(path, direct);
  if (direct) {
    staged_.push_back({path, "", content, true});
    return;
  }
  staged_.push_back({path, tmp, "", false});  // from here on the destructor removes tmp
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd < 0) throw RuntimeError(cannot_write(path, errno));
  const bool ok = write_all(fd, content);
  const int err = errno;
  if (::close(fd) != 0 || !ok) throw RuntimeError(cannot_write(path, ok ? errno : err));
}

void OutputSet::add(const std::string& path, const std::function<void(const std::string& tmp)>& write) {
  bool direct = false;
  const std::string tmp = make_temp(path, direct);
  if (direct && path == kStdout) throw RuntimeError("this output is binary and needs a file path, not '-' (standard output)");
  if (direct) throw RuntimeError(path + ": not a regular file, cannot write this output there");
  staged_.push_back({path, tmp, "", false});
  try {
    write(tmp);
  } catch (const RuntimeError& e) {
    throw RuntimeError(path + ": cannot write output (" + e.what() + ")");
  }
}

void OutputSet::commit() {
  // Backups of the destinations that a rename will replace, so that a failing rename can
  // put every earlier one back (a hard link: no copy; skipped where links are unsupported).
  std::vector<std::string> backups(staged_.size());
  for (size_t i = 0; i < staged_.size(); ++i) {
    const auto& s = staged_[i];
    if (s.is_direct) continue;
    struct stat st {};
    if (::stat(s.path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    const std::string b = s.tmp + ".old";
    if (::link(s.path.c_str(), b.c_str()) == 0) backups[i] = b;
  }
  auto drop_backups = [&] {
    for (const auto& b : backups)
      if (!b.empty()) ::unlink(b.c_str());
  };
  for (size_t i = 0; i < staged_.size(); ++i) {
    auto& s = staged_[i];
    int err = 0;
    if (s.is_direct && s.path == kStdout) {
      std::fflush(stdout);
      if (!write_all(STDOUT_FILENO, s.direct)) err = errno;
    } else if (s.is_direct) {
      const int fd = ::open(s.path.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd < 0 || !write_all(fd, s.direct)) err = errno;
      if (fd >= 0) ::close(fd);
    } else if (::rename(s.tmp.c_str(), s.path.c_str()) != 0) {
      err = errno;
    } else {
      s.tmp.clear();  // now the destination
    }
    if (err == 0) continue;
    // Undo: earlier destinations get their old content back (or disappear when new).
    for (size_t j = 0; j < i; ++j) {
      if (staged_[j].is_direct) continue;
      if (!backups[j].empty()) ::rename(backups[j].c_str(), staged_[j].path.c_str());
      else ::unlink(staged_[j].path.c_str());
    }
    drop_backups();
    throw RuntimeError(cannot_write(s.path, err));
  }
  drop_backups();
  staged_.clear();
}

}  // namespace neusight::cli
