// The fs calls, on plain POSIX and stdio, run on the blocking pool
// (fs_service.hpp).
#include "host/io/fs_service.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "host/error.hpp"

namespace host::io {

struct FsService::File {
  std::mutex mu;  // one call at a time on the file (two tasks of its process may call at once)
  std::FILE* f = nullptr;
  Pid owner;
  ~File() {
    if (f) std::fclose(f);
  }
};

FsService::~FsService() = default;

namespace {

[[noreturn]] void fail(std::string text) { throw CallError{std::move(text)}; }
[[noreturn]] void fail_errno(const std::string& what) { fail(errno_error(errno, what)); }

const std::string& string_arg(const std::vector<CallValue>& args, std::size_t i, const char* name) {
  if (i >= args.size() || !args[i].is_string()) fail(make_error(ErrorKind::Invalid, std::string(name) + " must be a string"));
  return args[i].string;
}

// A path goes to the system as a C string: a NUL byte in it would cut it
// short, so that another file than the one named would be used.
const std::string& path_arg(const std::vector<CallValue>& args, std::size_t i, const char* name) {
  const std::string& s = string_arg(args, i, name);
  if (s.find('\0') != std::string::npos) fail(make_error(ErrorKind::Invalid, std::string(name) + " contains a NUL byte"));
  return s;
}

double number_arg(const std::vector<CallValue>& args, std::size_t i, const char* name) {
  if (i >= args.size() || !args[i].is_number()) fail(make_error(ErrorKind::Invalid, std::string(name) + " must be a number"));
  return args[i].number;
}

std::string ok() { return CallResultWriter().boolean(true).finish(); }

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

// What one call may read: the calling process's memory limit less what
// its heap holds already (a read's bytes end up in that heap), and
// whether the process is still there to take them, asked between chunks
// so that an endless source stops soon after its reader ended.
struct FsService::ReadBudget {
  const FsService& svc;
  const Pid& caller;
  std::size_t left;
  std::size_t since_check = 0;

  // n more bytes, after `held` the call holds already.
  void take(const std::string& what, std::size_t n, std::size_t held) {
    if (held + n > left)
      fail(make_error(ErrorKind::Limit, "memory (" + what + ": more than the process's memory limit of " +
                                            std::to_string(svc.read_limit_) + " bytes allows)"));
    since_check += n;
    if (since_check >= (1u << 20)) {
      since_check = 0;
      if (svc.alive_ && !svc.alive_(caller)) fail(make_error(ErrorKind::Canceled));
    }
  }
};

namespace {

// regular_only: anything but a plain file is refused before a byte is
// read, and the open does not wait for a FIFO's writer (the host's own
// reads of certificates and keys).
std::string read_whole(const std::string& path, FsService::ReadBudget& budget, bool regular_only) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | (regular_only ? O_NONBLOCK : 0)));
  if (fd.get() < 0) fail_errno(path);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) fail_errno(path);
  if (regular_only && !S_ISREG(st.st_mode)) fail(make_error(ErrorKind::Invalid, path + ": not a regular file"));
  if (S_ISDIR(st.st_mode)) fail(make_error(ErrorKind::Io, path + ": is a directory"));
  std::string data;
  if (S_ISREG(st.st_mode)) {
    const auto size = static_cast<std::size_t>(st.st_size);
    budget.take(path, size, 0);  // too large for the process: answered before reading any of it
    data.reserve(size);
  }
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail_errno(path);
    }
    if (n == 0) break;
    budget.take(path, static_cast<std::size_t>(n), data.size());
    data.append(buf, static_cast<std::size_t>(n));
  }
  return CallResultWriter().string(data).finish();
}

std::string write_whole(const std::string& path, const std::string& data, bool append) {
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC);
  Fd fd(::open(path.c_str(), flags, 0666));
  if (fd.get() < 0) fail_errno(path);
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd.get(), data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail_errno(path);
    }
    done += static_cast<std::size_t>(n);
  }
  return ok();
}

const char* type_name(mode_t mode) {
  if (S_ISREG(mode)) return "file";
  if (S_ISDIR(mode)) return "directory";
  if (S_ISLNK(mode)) return "link";
  return "other";
}

std::string stat_path(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) fail_errno(path);
  CallResultWriter w;
  w.table(0, 4);
  w.key("type").string(type_name(st.st_mode));
  w.key("size").number(static_cast<double>(st.st_size));
  w.key("mtime").number(static_cast<double>(st.st_mtim.tv_sec));
  w.key("mode").number(static_cast<double>(st.st_mode & 07777));
  return w.finish();
}

std::string list_dir(const std::string& path) {
  DIR* d = ::opendir(path.c_str());
  if (!d) fail_errno(path);
  std::vector<std::string> names;
  errno = 0;
  while (const dirent* e = ::readdir(d)) {
    if (!std::strcmp(e->d_name, ".") || !std::strcmp(e->d_name, "..")) continue;
    names.emplace_back(e->d_name);
  }
  const int err = errno;
  ::closedir(d);
  if (err != 0) fail(errno_error(err, path));
  std::sort(names.begin(), names.end());
  CallResultWriter w;
  w.table(names.size(), 0);
  for (const auto& n : names) w.string(n);
  return w.finish();
}

bool is_directory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string make_dir(const std::string& path, bool parents) {
  if (!parents) {
    if (::mkdir(path.c_str(), 0777) != 0) fail_errno(path);
    return ok();
  }
  // Each prefix that ends at a slash, then the whole path; one that is
  // there already as a directory is fine (as mkdir -p).
  for (std::size_t at = path.find('/', 1);; at = path.find('/', at + 1)) {
    const std::string prefix = at == std::string::npos ? path : path.substr(0, at);
    if (!prefix.empty() && ::mkdir(prefix.c_str(), 0777) != 0 && !(errno == EEXIST && is_directory(prefix)))
      fail_errno(prefix);
    if (at == std::string::npos) break;
  }
  return ok();
}

std::string remove_path(const std::string& path) {
  if (::unlink(path.c_str()) == 0) return ok();
  if (errno != EISDIR && errno != EPERM) fail_errno(path);
  if (::rmdir(path.c_str()) != 0) fail_errno(path);
  return ok();
}

// The io library's modes: r, w, a, r+, w+, a+, each with an optional b.
bool valid_mode(const std::string& m) {
  static const char* const modes[] = {"r", "w", "a", "r+", "w+", "a+", "rb", "wb", "ab", "r+b", "w+b", "a+b"};
  return std::any_of(std::begin(modes), std::end(modes), [&](const char* x) { return m == x; });
}

// io's read formats on a stdio stream; each result written to w, stopping
// after the first that finds nothing (nil), as io's read does.
void read_formats(std::FILE* f, const std::vector<CallValue>& args, std::size_t first, CallResultWriter& w,
                  FsService::ReadBudget& budget) {
  std::size_t held = 0;  // what this call's earlier formats read
  const std::string what = "read";
  std::vector<CallValue> defaults;
  if (first >= args.size()) {
    defaults.resize(1);
    defaults[0].type = CallValue::Type::String;
    defaults[0].string = "l";
  }
  const std::vector<CallValue>& formats = first >= args.size() ? defaults : args;
  const std::size_t start = first >= args.size() ? 0 : first;
  for (std::size_t i = start; i < formats.size(); ++i) {
    const CallValue& fmt = formats[i];
    bool got = true;
    if (fmt.is_number()) {
      const double n = fmt.number;
      if (n < 0 || n != std::floor(n)) fail(make_error(ErrorKind::Invalid, "bad read count"));
      if (n == 0) {
        const int c = std::getc(f);
        if (c == EOF) {
          got = false;
        } else {
          std::ungetc(c, f);
          w.string("");
        }
      } else {
        // Grown as the bytes come: a count larger than the file costs no
        // more than the file.
        const std::size_t want = n >= 9e15 ? std::size_t(9e15) : static_cast<std::size_t>(n);
        std::string got_bytes;
        char buf[65536];
        while (got_bytes.size() < want) {
          const std::size_t r = std::fread(buf, 1, std::min(sizeof buf, want - got_bytes.size()), f);
          if (r == 0) break;
          budget.take(what, r, held + got_bytes.size());
          got_bytes.append(buf, r);
        }
        if (got_bytes.empty()) got = false;
        else w.string(got_bytes);
        held += got_bytes.size();
      }
    } else if (fmt.is_string()) {
      std::string_view s = fmt.string;
      if (!s.empty() && s[0] == '*') s.remove_prefix(1);
      const char kind = s.empty() ? '?' : s[0];
      if (kind == 'n') {
        double d;
        if (std::fscanf(f, "%lf", &d) == 1) w.number(d);
        else got = false;
      } else if (kind == 'l' || kind == 'L') {
        std::string line;
        int c;
        while ((c = std::getc(f)) != EOF && c != '\n') {
          if ((line.size() & 65535) == 65535) budget.take(what, 65536, held + line.size());
          line.push_back(static_cast<char>(c));
        }
        held += line.size();
        if (c == '\n' && kind == 'L') line.push_back('\n');
        if (c == EOF && line.empty()) got = false;
        else w.string(line);
      } else if (kind == 'a') {
        std::string all;
        char buf[65536];
        std::size_t r;
        while ((r = std::fread(buf, 1, sizeof buf, f)) > 0) {
          budget.take(what, r, held + all.size());
          all.append(buf, r);
        }
        held += all.size();
        w.string(all);
      } else {
        fail(make_error(ErrorKind::Invalid, "bad read format '" + fmt.string + "'"));
      }
    } else {
      fail(make_error(ErrorKind::Invalid, "bad read format"));
    }
    if (std::ferror(f)) fail(errno_error(errno, "read"));
    if (!got) {
      w.nil();
      return;
    }
  }
}

}  // namespace

// args[i]: the bytes the caller's heap holds (fs.lua sends them).
FsService::ReadBudget FsService::budget_for(const Pid& caller, const std::vector<CallValue>& args, std::size_t i) const {
  const double used = i < args.size() && args[i].is_number() && args[i].number > 0 ? args[i].number : 0;
  const std::size_t held = used >= static_cast<double>(read_limit_) ? read_limit_ : static_cast<std::size_t>(used);
  return ReadBudget{*this, caller, read_limit_ - held};
}

std::shared_ptr<FsService::File> FsService::find(const Pid& caller, double id) {
  std::lock_guard lock(mu_);
  auto it = files_.find(static_cast<std::uint64_t>(id));
  if (it == files_.end() || !(it->second->owner == caller)) fail(make_error(ErrorKind::Invalid, "file is closed"));
  return it->second;
}

std::string FsService::open(const Pid& caller, const std::vector<CallValue>& args) {
  const std::string& path = path_arg(args, 1, "path");
  const std::string& mode = string_arg(args, 2, "mode");
  if (!valid_mode(mode)) fail(make_error(ErrorKind::Invalid, "bad mode '" + mode + "'"));
  std::FILE* f = std::fopen(path.c_str(), (mode + "e").c_str());
  if (!f) fail_errno(path);
  auto file = std::make_shared<File>();
  file->f = f;
  file->owner = caller;
  std::uint64_t id;
  {
    std::lock_guard lock(mu_);
    id = ++next_id_;
    files_.emplace(id, std::move(file));
    owned_[caller].insert(id);
    count_.store(files_.size(), std::memory_order_relaxed);
  }
  return CallResultWriter().number(static_cast<double>(id)).finish();
}

std::string FsService::close(const Pid& caller, double id) {
  std::shared_ptr<File> file;
  {
    std::lock_guard lock(mu_);
    auto it = files_.find(static_cast<std::uint64_t>(id));
    if (it == files_.end() || !(it->second->owner == caller)) fail(make_error(ErrorKind::Invalid, "file is closed"));
    file = std::move(it->second);
    files_.erase(it);
    if (auto o = owned_.find(caller); o != owned_.end()) {
      o->second.erase(static_cast<std::uint64_t>(id));
      if (o->second.empty()) owned_.erase(o);
    }
    count_.store(files_.size(), std::memory_order_relaxed);
  }
  std::lock_guard lock(file->mu);  // after a call in progress on it
  const int rc = std::fclose(file->f);
  file->f = nullptr;
  if (rc != 0) fail(errno_error(errno, "close"));
  return ok();
}

void FsService::close_owned(const Pid& owner) {
  if (count_.load(std::memory_order_relaxed) == 0) return;  // most processes never open a file
  std::vector<std::shared_ptr<File>> closing;  // closed here, or by the last call still using one
  {
    std::lock_guard lock(mu_);
    auto o = owned_.find(owner);
    if (o == owned_.end()) return;
    for (std::uint64_t id : o->second) {
      auto it = files_.find(id);
      if (it == files_.end()) continue;
      closing.push_back(std::move(it->second));
      files_.erase(it);
    }
    owned_.erase(o);
    count_.store(files_.size(), std::memory_order_relaxed);
  }
}

std::string FsService::handle(const Pid& caller, const std::vector<CallValue>& args) {
  const std::string& op = string_arg(args, 0, "operation");
  if (op == "read") {
    ReadBudget budget = budget_for(caller, args, 2);
    const bool regular_only = args.size() > 3 && args[3].type == CallValue::Type::Boolean && args[3].boolean;
    return read_whole(path_arg(args, 1, "path"), budget, regular_only);
  }
  if (op == "write") return write_whole(path_arg(args, 1, "path"), string_arg(args, 2, "data"), false);
  if (op == "append") return write_whole(path_arg(args, 1, "path"), string_arg(args, 2, "data"), true);
  if (op == "stat") return stat_path(path_arg(args, 1, "path"));
  if (op == "list") return list_dir(path_arg(args, 1, "path"));
  if (op == "mkdir") {
    const bool parents = args.size() > 2 && args[2].type == CallValue::Type::Boolean && args[2].boolean;
    return make_dir(path_arg(args, 1, "path"), parents);
  }
  if (op == "remove") return remove_path(path_arg(args, 1, "path"));
  if (op == "rename") {
    const std::string& from = path_arg(args, 1, "from");
    if (::rename(from.c_str(), path_arg(args, 2, "to").c_str()) != 0) fail_errno(from);
    return ok();
  }
  if (op == "open") return open(caller, args);
  if (op == "close") return close(caller, number_arg(args, 1, "file"));
  // The calls on an open file: one at a time on each.
  auto file = find(caller, number_arg(args, 1, "file"));
  std::lock_guard lock(file->mu);
  if (!file->f) fail(make_error(ErrorKind::Invalid, "file is closed"));
  std::FILE* f = file->f;
  if (op == "fread") {
    ReadBudget budget = budget_for(caller, args, 2);
    CallResultWriter w;
    read_formats(f, args, 3, w, budget);
    return w.finish();
  }
  if (op == "fwrite") {
    for (std::size_t i = 2; i < args.size(); ++i) {
      const CallValue& v = args[i];
      std::string text;
      if (v.is_string()) {
        text = v.string;
      } else if (v.is_number()) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.14g", v.number);
        text = buf;
      } else {
        fail(make_error(ErrorKind::Invalid, "write takes strings and numbers"));
      }
      if (!text.empty() && std::fwrite(text.data(), 1, text.size(), f) != text.size()) fail(errno_error(errno, "write"));
    }
    return ok();
  }
  if (op == "flush") {
    if (std::fflush(f) != 0) fail(errno_error(errno, "flush"));
    return ok();
  }
  if (op == "seek") {
    const std::string& whence = string_arg(args, 2, "whence");
    const double offset = number_arg(args, 3, "offset");
    const int w = whence == "set" ? SEEK_SET : whence == "end" ? SEEK_END : whence == "cur" ? SEEK_CUR : -1;
    if (w < 0) fail(make_error(ErrorKind::Invalid, "bad whence '" + whence + "'"));
    if (std::fseek(f, static_cast<long>(offset), w) != 0) fail(errno_error(errno, "seek"));
    return CallResultWriter().number(static_cast<double>(std::ftell(f))).finish();
  }
  fail(make_error(ErrorKind::Invalid, "unknown fs operation '" + op + "'"));
}

}  // namespace host::io
