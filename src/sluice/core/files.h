// Writing a file so that readers see all of it or none: a state file, an index, a readiness
// file that another process polls for. Reading a small file whole (a cgroup or sysfs value).
#ifndef SLUICE_CORE_FILES_H_
#define SLUICE_CORE_FILES_H_

#include <optional>
#include <string>
#include <string_view>

#include "sluice/core/status.h"

namespace sluice {

// Writes `contents` to a temporary file beside `path` (unique to this process and call),
// then renames it over `path`: a reader sees the old file, no file, or the whole new one,
// never a part. On failure the temporary file is removed and the error names the file and
// the system's reason (the caller adds what the file is for).
Status WriteFileAtomically(const std::string& path, std::string_view contents);

// The whole of `path`; nullopt when it cannot be opened. For small files only.
std::optional<std::string> ReadFile(const std::string& path);

}  // namespace sluice

#endif  // SLUICE_CORE_FILES_H_
