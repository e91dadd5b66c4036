// Codec bytes read into CallValues and written from C++ (call_values.hpp).
#include "host/io/call_values.hpp"

#include <cstring>
#include <stdexcept>

#include "host/io/value_format.hpp"
#include "host/commands.hpp"
#include "host/error.hpp"
#include "host/scheduler.hpp"

namespace host::io {

const CallValue* CallValue::field(std::string_view key) const {
  if (type != Type::Table) return nullptr;
  for (const auto& [k, v] : fields)
    if (k.type == Type::String && k.string == key) return &v;
  return nullptr;
}

namespace {

class Reader {
 public:
  explicit Reader(std::string_view in) : p_(in.data()), end_(in.data() + in.size()) {}

  bool count(std::uint64_t& n) { return varint(n); }
  bool at_end() const { return p_ == end_; }
  std::size_t left() const { return static_cast<std::size_t>(end_ - p_); }
  const std::string& error() const { return error_; }

  bool value(CallValue& v, int depth) {
    if (depth >= kMaxDepth) return fail("nested too deep");
    if (p_ >= end_) return fail("truncated value");
    const auto tag = static_cast<std::uint8_t>(*p_++);
    switch (tag) {
      case kNil: v.type = CallValue::Type::Nil; return true;
      case kFalse:
      case kTrue:
        v.type = CallValue::Type::Boolean;
        v.boolean = tag == kTrue;
        return true;
      case kInt: {
        std::uint64_t z;
        if (!varint(z)) return false;
        v.type = CallValue::Type::Number;
        v.number = static_cast<double>(unzigzag(z));
        return true;
      }
      case kDouble:
        if (left() < 8) return fail("truncated number");
        v.type = CallValue::Type::Number;
        std::memcpy(&v.number, p_, 8);
        p_ += 8;
        return true;
      case kString: {
        std::uint64_t n;
        if (!varint(n)) return false;
        if (n > left()) return fail("truncated string");
        v.type = CallValue::Type::String;
        v.string.assign(p_, n);
        p_ += n;
        return true;
      }
      case kTable: {
        std::uint64_t n, m;
        if (!varint(n) || !varint(m)) return false;
        if (n > left() || m > left() || n + 2 * m > left()) return fail("table size beyond the input");
        v.type = CallValue::Type::Table;
        v.array.resize(n);
        for (auto& e : v.array)
          if (!value(e, depth + 1)) return false;
        v.fields.resize(m);
        for (auto& [k, e] : v.fields)
          if (!value(k, depth + 1) || !value(e, depth + 1)) return false;
        return true;
      }
      default: return fail("unknown tag");
    }
  }

 private:
  bool varint(std::uint64_t& v) {
    switch (read_varint(p_, end_, v)) {
      case Varint::kOk: return true;
      case Varint::kTruncated: return fail("truncated count");
      case Varint::kTooLong: return fail("count too long");
    }
    return false;
  }
  bool fail(const char* why) {
    error_ = why;
    return false;
  }
  const char* p_;
  const char* end_;
  std::string error_;
};

void put_varint(std::string& out, std::uint64_t v) {
  char buf[10];
  out.append(buf, static_cast<std::size_t>(write_varint(buf, v) - buf));
}

}  // namespace

bool read_call_values(std::string_view bytes, std::vector<CallValue>& out, std::string* error) {
  out.clear();
  if (bytes.empty()) return true;  // no arguments at all
  Reader r(bytes);
  std::uint64_t n;
  auto fail = [&](const std::string& why) {
    if (error) *error = "corrupt call arguments: " + why;
    out.clear();
    return false;
  };
  if (!r.count(n)) return fail(r.error());
  if (n > r.left()) return fail("count beyond the input");
  out.resize(n);
  for (auto& v : out)
    if (!r.value(v, 0)) return fail(r.error());
  if (!r.at_end()) return fail("trailing bytes");
  return true;
}

bool read_call_request(CommandRequest& req, std::vector<CallValue>& args) {
  std::string err;
  if (read_call_values(req.bytes, args, &err)) return true;
  req.scheduler->complete_yield(req.pid, req.tag, {}, make_error(ErrorKind::Invalid, err));
  return false;
}

void CallResultWriter::value_written() {
  if (open_.empty()) {
    ++top_;
    return;
  }
  if (--open_.back() == 0) {
    open_.pop_back();
    value_written();  // the table just completed is a value of its parent
  }
}

CallResultWriter& CallResultWriter::nil() {
  body_.push_back(static_cast<char>(kNil));
  value_written();
  return *this;
}

CallResultWriter& CallResultWriter::boolean(bool b) {
  body_.push_back(static_cast<char>(b ? kTrue : kFalse));
  value_written();
  return *this;
}

CallResultWriter& CallResultWriter::number(double d) {
  char buf[16];
  const std::size_t n = encode_number(d, buf);
  body_.append(buf + 1, n - 1);  // without encode_number's count
  value_written();
  return *this;
}

CallResultWriter& CallResultWriter::string(std::string_view s) {
  body_.push_back(static_cast<char>(kString));
  put_varint(body_, s.size());
  body_.append(s);
  value_written();
  return *this;
}

CallResultWriter& CallResultWriter::moved(std::uint64_t id, std::string_view cls) {
  body_.push_back(static_cast<char>(kMoved));
  put_varint(body_, id);
  put_varint(body_, cls.size());
  body_.append(cls);
  value_written();
  return *this;
}

CallResultWriter& CallResultWriter::table(std::size_t array, std::size_t fields) {
  body_.push_back(static_cast<char>(kTable));
  put_varint(body_, array);
  put_varint(body_, fields);
  const std::size_t owed = array + 2 * fields;
  if (owed == 0) value_written();
  else open_.push_back(owed);
  return *this;
}

std::string CallResultWriter::finish() {
  if (!open_.empty()) throw std::logic_error("CallResultWriter: a table was left unfinished");
  std::string out;
  put_varint(out, top_);
  out += body_;
  body_.clear();
  top_ = 0;
  return out;
}

}  // namespace host::io
