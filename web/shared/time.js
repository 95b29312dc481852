// How chatroom's pages show a time: one place, so the dashboard, the
// console and the board app say times alike. Times come from the server as
// RFC 3339 text (or milliseconds); anything unreadable shows as it came.
//
// An ES module served at /assets/time.js; the board app has it inlined.

/** Milliseconds since the epoch, or null. */
export function parseTs(ts) {
  if (ts === null || ts === undefined || ts === '') return null;
  const t = typeof ts === 'number' ? ts : Date.parse(ts);
  return Number.isNaN(t) ? null : t;
}

/** "14:05" today, "Mar 3 14:05" another day; '' for no time. */
export function clock(ts) {
  const t = parseTs(ts);
  if (t === null) return ts ? String(ts) : '';
  const d = new Date(t);
  const hm = d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', hourCycle: 'h23' });
  if (d.toDateString() === new Date().toDateString()) return hm;
  return d.toLocaleDateString([], { month: 'short', day: 'numeric' }) + ' ' + hm;
}

/** "2026-03-03 14:05" (local), for tables and logs; `none` when absent. */
export function stamp(ts, none = 'never') {
  const t = parseTs(ts);
  if (t === null) return ts ? String(ts) : none;
  const d = new Date(t);
  const p = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}`;
}

/** The full local date and time, for a tooltip. */
export function full(ts) {
  const t = parseTs(ts);
  return t === null ? '' : new Date(t).toLocaleString();
}

/** "just now", "5m ago", "3h ago", "2d ago"; "never" for no time. */
export function ago(ts) {
  const t = parseTs(ts);
  if (t === null) return 'never';
  const s = Math.max(0, (Date.now() - t) / 1000);
  if (s < 45) return 'just now';
  if (s < 3600) return Math.round(s / 60) + 'm ago';
  if (s < 86400) return Math.round(s / 3600) + 'h ago';
  return Math.round(s / 86400) + 'd ago';
}

/** "12m 5s left" / "lapsed 3m 2s ago", for a lease end. */
export function countdown(ts) {
  const t = parseTs(ts);
  if (t === null) return '';
  let s = Math.round((t - Date.now()) / 1000);
  const late = s < 0;
  s = Math.abs(s);
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const sec = s % 60;
  const span = h ? h + 'h ' + m + 'm' : m ? m + 'm ' + sec + 's' : sec + 's';
  return late ? 'lapsed ' + span + ' ago' : span + ' left';
}

/** The same, short, for a card: "lease 59m left", "lease lapsed". */
export function leaseShort(ts) {
  const t = parseTs(ts);
  if (t === null) return '';
  const s = Math.round((t - Date.now()) / 1000);
  if (s < 0) return 'lease lapsed';
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  return 'lease ' + (h ? h + 'h ' + m + 'm' : m ? m + 'm' : s + 's') + ' left';
}
