// What the job commands (`geoloco submit/status/watch/cancel`, docs/design.md §2, §7)
// print and return: pure functions from the daemon's reply JSON (the control
// protocol of control/control_socket.h, described in cli/README.md) to the
// lines a person reads, so every layout is tested without a daemon. Nothing
// here opens a socket; job_commands.cpp does that and only prints these.
//
// Replies come from another process: a missing field, a null, or a value of
// the wrong type prints "-" instead of throwing.
#pragma once

#include <sys/types.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace geoloco::cli {

/// Exit codes of the job commands (also the usage code of every command).
enum JobExit : int {
  kExitOk = 0,
  kExitRefused = 1,       ///< the daemon refused, or the job failed or was cancelled
  kExitUsage = 2,         ///< bad arguments, an unreadable job file
  kExitUnreachable = 3,   ///< no daemon at the socket, permission denied, connection lost
  kExitInterrupted = 130  ///< Ctrl-C (128 + SIGINT), as a shell reports it
};

/// The control socket when no --socket is given: $GEOLOCO_CONTROL_SOCKET if
/// set and not empty (`env_value` is getenv's result), else the daemon's
/// default /run/geoloco/geolocod.sock.
std::string default_socket_path(const char* env_value);

/// Bytes in binary units with one decimal: "512 B", "1.5 KiB", "12.3 MiB",
/// up to PiB. A value that would round to 1024.0 of a unit moves up one
/// ("1.0 MiB", never "1024.0 KiB").
std::string human_bytes(double bytes);

/// `geoloco watch`: the column header, printed once before the first round.
std::string watch_header();
/// One aligned line for a committed ROUND object: round, participants as
/// "n/m" (m = participants + late), loss, eval loss, bytes sent, compression
/// ratio, compute / waiting / exchange seconds, and the late sites ("-").
std::string watch_round_line(const nlohmann::json& round);
/// An {"event": text, "state": ...} line as "# text".
std::string watch_event_line(const nlohmann::json& event);

/// `geoloco status`: the block for one JOB object, no trailing newlines:
/// a title line "name: state, round r/stop (coordinator c)" then indented
/// key/value rows (live sites, lagging, loss, eval loss, tokens, bytes,
/// checkpoint, message).
std::vector<std::string> job_block(const nlohmann::json& job);
/// The whole status reply {"site", "jobs": [...]}: a "site S: N jobs" line,
/// then each job's block, blocks separated by an empty line. With `job` not
/// empty only that job's block (the caller checks it is there).
std::vector<std::string> status_lines(const nlohmann::json& reply, const std::string& job);
/// Whether a status reply lists a job of that name.
bool status_has_job(const nlohmann::json& reply, const std::string& job);
/// For a job the daemon does not know: "no job 'X' on site S (jobs there: a,
/// b); `geoloco status` lists the jobs".
std::string missing_job_line(const nlohmann::json& status_reply, const std::string& job);

/// `geoloco submit`: what a successful reply {"job","coordinator","sites",
/// "message"} prints.
std::vector<std::string> submit_lines(const nlohmann::json& reply);

/// Whether user `uid` (primary group `gid`, supplementary `groups`) may use
/// a control socket file owned by `owner`:`group`, by the daemon's rule
/// (control/control_socket.h: root, the daemon's user, who owns the socket,
/// or a member of the socket's group). Only picks the hint a failure prints;
/// the daemon alone decides what it accepts.
bool socket_admits(uid_t uid, gid_t gid, const std::vector<gid_t>& groups, uid_t owner, gid_t group);

/// "  add your user to the geoloco group (sudo adduser $USER geoloco) and
/// log in again": the hint for a user the socket or the daemon refuses.
std::string join_group_hint();

/// The daemon hung up on a user it does not admit before the request was
/// even sent (its refusal line can be lost that way): what happened and
/// join_group_hint().
std::vector<std::string> hung_up_lines(const std::string& command, const std::string& path, const std::string& detail);

/// Why `command` could not reach the daemon at `path`, given the errno of a
/// connect() to it (0 when a connect works, `detail` then says what broke),
/// and what to do next: start geolocod or point --socket elsewhere, or join
/// the geoloco group when the socket refused us.
std::vector<std::string> unreachable_lines(const std::string& command, const std::string& path, int connect_errno,
                                           const std::string& detail);

}  // namespace geoloco::cli
