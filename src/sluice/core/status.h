// Error handling for Sluice: absl::Status / absl::StatusOr everywhere, with two macros
// that keep call sites short. Errors are values; exceptions are never thrown by Sluice
// code (a foreign library's exception is caught at the boundary and turned into a Status).
#ifndef SLUICE_CORE_STATUS_H_
#define SLUICE_CORE_STATUS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

#include <string>
#include <string_view>

namespace sluice {

using absl::Status;
// Debian's abseil is built with its own absl::string_view (not std::string_view), so a
// std::string_view must be converted before it is passed to absl::StrCat, StrSplit, Status
// constructors and friends: `absl::StrCat("op ", Av(name))`.
inline absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }
// The reverse, for absl::string_view results (Status::message()).
inline std::string_view Sv(absl::string_view s) { return std::string_view(s.data(), s.size()); }

using absl::StatusOr;

// Returns a copy of `status` whose message is prefixed with `context` ("context: message").
// An OK status stays OK.
Status Annotate(const Status& status, std::string_view context);

}  // namespace sluice

#define SLUICE_STATUS_CONCAT_INNER_(a, b) a##b
#define SLUICE_STATUS_CONCAT_(a, b) SLUICE_STATUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (a Status); returns it from the enclosing function if it is not OK.
#define SLUICE_RETURN_IF_ERROR(expr)                          \
  do {                                                        \
    ::absl::Status sluice_status_ = (expr);                   \
    if (!sluice_status_.ok()) return sluice_status_;          \
  } while (false)

// Evaluates `rexpr` (a StatusOr<T>); on error returns its status, else moves the value
// into `lhs` (which may be a declaration such as `auto x`).
#define SLUICE_ASSIGN_OR_RETURN(lhs, rexpr) \
  SLUICE_ASSIGN_OR_RETURN_IMPL_(SLUICE_STATUS_CONCAT_(sluice_statusor_, __LINE__), lhs, rexpr)

#define SLUICE_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                                  \
  if (!tmp.ok()) return tmp.status();                  \
  lhs = std::move(tmp).value()

#endif  // SLUICE_CORE_STATUS_H_
