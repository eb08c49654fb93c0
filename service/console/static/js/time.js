// Times as people read them: a server's timestamps in the browser's local
// time to the millisecond, with how long ago; and the span of time a
// running batch's timeline stands for.
import { fmtSeconds } from "./dom.js";

/**
 * parseTime reads an RFC 3339 timestamp (a protobuf Timestamp in JSON, with
 * up to nanoseconds) as a Date, or null.
 */
export function parseTime(iso) {
  if (typeof iso !== "string" || !iso) return null;
  // Date reads milliseconds; finer digits are dropped, not rounded.
  const s = iso.replace(/(\.\d{3})\d+/, "$1");
  const d = new Date(s);
  return Number.isNaN(d.getTime()) ? null : d;
}

const pad = (n, w = 2) => String(n).padStart(w, "0");

/** day is d's local date, 2006-01-02. */
function day(d) {
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}`;
}

/** clock is d's local time of day to the millisecond, 15:04:05.000. */
export function clock(d) {
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

/** zone is the local offset from UTC at d, +01:00. */
function zone(d) {
  const off = -d.getTimezoneOffset();
  return `${off < 0 ? "-" : "+"}${pad(Math.floor(Math.abs(off) / 60))}:${pad(Math.abs(off) % 60)}`;
}

/** ago says how long before now (in ms) a time was: "3 s ago", "in 2 min". */
export function ago(ms) {
  const future = ms < 0;
  const s = Math.abs(ms) / 1000;
  let text;
  if (s < 1) return "just now";
  if (s < 60) text = `${Math.floor(s)} s`;
  else if (s < 3600) text = `${Math.floor(s / 60)} min`;
  else if (s < 48 * 3600) text = `${Math.floor(s / 3600)} h`;
  else text = `${Math.floor(s / 86400)} days`;
  return future ? `in ${text}` : `${text} ago`;
}

/**
 * when describes timestamp iso for a page: {text, title, iso}: the local
 * time to the millisecond (with the date when it is not today's) and how
 * long ago; title adds the date and the zone. Text that is no timestamp is
 * shown as it is.
 */
export function when(iso, now = Date.now()) {
  const d = parseTime(iso);
  if (!d) return { text: String(iso || ""), title: "", iso: "" };
  const today = day(new Date(now)) === day(d);
  return {
    text: `${today ? "" : day(d) + " "}${clock(d)} (${ago(now - d.getTime())})`,
    title: `${day(d)} ${clock(d)} ${zone(d)}`,
    iso: String(iso),
  };
}

const steps = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600];

/** roundUp is a round number of seconds at least s: 1, 2, 5, 10, 15, 30 s, 1, 2, 5 … min. */
export function roundUp(s) {
  for (const x of steps) if (x >= s) return x;
  return Math.ceil(s / 3600) * 3600;
}

/**
 * span is how many milliseconds from the batch's start a timeline's track
 * stands for. calls are {start, end, timeout} in ms from the batch's start
 * (start undefined before the call starts, end before it ends, timeout
 * when one is known). While the batch runs the track reaches each running
 * call's deadline, or, for a call whose timeout is not known, a round time
 * ahead of it, so a bar shows how much of its time a call has used; after,
 * it is the batch's own span.
 */
export function span(calls, now, running) {
  let out = 1;
  for (const c of calls) {
    if (c.start === undefined) continue;
    const end = c.end ?? now;
    out = Math.max(out, end);
    if (running && c.end === undefined) {
      out = Math.max(out, c.timeout !== undefined ? c.start + c.timeout : c.start + 1000 * roundUp((1.25 * (now - c.start)) / 1000));
    }
  }
  return running ? out : out * 1.02; // room for the last bar
}

/** elapsed says how long a call has run, and of how long a timeout: "1.20 s of 30.0 s". */
export function elapsed(ms, timeout) {
  const e = fmtSeconds(ms / 1000);
  return timeout !== undefined ? `${e} of ${fmtSeconds(timeout / 1000)}` : e;
}
