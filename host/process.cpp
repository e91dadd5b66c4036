// Names of the process model's enums, for logs and test messages.
#include "host/process.hpp"

namespace host {

const char* status_name(Status status) {
  switch (status) {
    case Status::Continue: return "continue";
    case Status::Blocked: return "blocked";
    case Status::Idle: return "idle";
    case Status::Done: return "done";
    case Status::Failed: return "failed";
  }
  return "?";
}

}  // namespace host
