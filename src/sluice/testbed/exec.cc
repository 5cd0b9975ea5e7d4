#include "sluice/testbed/exec.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_join.h"

namespace sluice::testbed {

std::string JoinArgv(const std::vector<std::string>& argv) { return absl::StrJoin(argv, " "); }

StatusOr<ProgramResult> RunProgram(const std::vector<std::string>& argv) {
  std::vector<char*> cargv;
  cargv.reserve(argv.size() + 1);
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    const int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    execvp(cargv[0], cargv.data());
    _exit(127);
  }
  close(fds[1]);
  ProgramResult result;
  char buf[4096];
  for (;;) {
    const ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n > 0) {
      result.output.append(buf, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  close(fds[0]);
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0) {
    if (errno != EINTR) return absl::InternalError(absl::StrCat("waitpid: ", std::strerror(errno)));
  }
  if (WIFEXITED(wstatus)) {
    result.exit_code = WEXITSTATUS(wstatus);
  } else if (WIFSIGNALED(wstatus)) {
    result.exit_code = 128 + WTERMSIG(wstatus);
  }
  if (result.exit_code == 127 && result.output.empty()) {
    return absl::NotFoundError(absl::StrCat("cannot run '", argv[0], "'"));
  }
  return result;
}

Status RunChecked(const std::vector<std::string>& argv) {
  SLUICE_ASSIGN_OR_RETURN(ProgramResult r, RunProgram(argv));
  if (r.exit_code != 0) {
    while (!r.output.empty() && (r.output.back() == '\n' || r.output.back() == ' ')) {
      r.output.pop_back();
    }
    return absl::InternalError(
        absl::StrCat("'", JoinArgv(argv), "' exited with ", r.exit_code, ": ", r.output));
  }
  return absl::OkStatus();
}

}  // namespace sluice::testbed
