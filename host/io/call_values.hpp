// Values in the codec's byte format, read and written without a Lua state:
// a waiting call's arguments arrive at its command handler (on a worker,
// the blocking pool or the I/O thread) as codec bytes, and its results go
// back the same way, decoded into the task's return values
// (TaskKernel::complete_call). Threads: any; each object is one thread's.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace host {
struct CommandRequest;
}

namespace host::io {

// One decoded value. Tables keep their array part (1..n) and their other
// pairs apart, as the codec writes them.
struct CallValue {
  enum class Type : std::uint8_t { Nil, Boolean, Number, String, Table };
  Type type = Type::Nil;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<CallValue> array;
  std::vector<std::pair<CallValue, CallValue>> fields;

  bool is_nil() const { return type == Type::Nil; }
  bool is_string() const { return type == Type::String; }
  bool is_number() const { return type == Type::Number; }
  bool is_table() const { return type == Type::Table; }
  // The value of a string key in a table; nullptr when absent (or when
  // this is not a table).
  const CallValue* field(std::string_view key) const;
};

// Decodes codec bytes (a count, then the values). False, with why, on
// bytes that are not the codec's.
bool read_call_values(std::string_view bytes, std::vector<CallValue>& out, std::string* error);

// A call's failure, thrown inside a handler: what the waiting call
// returns after nil (the fs, exec and socket handlers' one error type).
struct CallError {
  std::string text;
};

// A command handler's first step: its request's arguments, or false when
// they are not the codec's (the call is then completed with the error).
bool read_call_request(CommandRequest& req, std::vector<CallValue>& args);

// Writes values in the codec's format, for a call's results. A table is
// begun with its two sizes and then takes exactly that many values
// (array), then key and value pairs (fields); finish() prepends the count
// of top-level values.
class CallResultWriter {
 public:
  CallResultWriter& nil();
  CallResultWriter& boolean(bool b);
  CallResultWriter& number(double d);
  CallResultWriter& string(std::string_view s);
  CallResultWriter& table(std::size_t array, std::size_t fields);
  // A moved value (codec.hpp): the decoder's hook makes it the receiving
  // process's object (bindings/socket_object.hpp says what cls may hold).
  CallResultWriter& moved(std::uint64_t id, std::string_view cls);
  // A field of a table being written: key, then its value.
  CallResultWriter& key(std::string_view k) { return string(k); }
  std::string finish();

 private:
  void value_written();
  std::string body_;
  std::size_t top_ = 0;
  std::vector<std::size_t> open_;  // values still owed to each open table, innermost last
};

}  // namespace host::io
