// chatroom dashboard: following /v1/stream with fetch: reconnecting with back-off, reading
// the Server-Sent Events, handing each to its section.
import { $ } from '/assets/dom.js';
import { addActivity } from './activity.js';
import { renderBoard, renderFiles } from './board.js';
import { addMessage } from './chat.js';
import { banner, renderOffline, setConn, setOffline, setOnline, setRefused } from './conn.js';
import { presenceChanged, refreshRoomsSoon } from './rooms.js';
import { MAX_BACKOFF, STALL_MS, state, TAIL } from './state.js';

// ---------- the stream ----------

/** Waits `ms`, or less when the reader asks to retry now. */
export function pause(ms) {
  return new Promise((resolve) => {
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      state.wake = null;
      resolve();
    }
    state.wake = done;
  });
}

export async function follow(room, gen) {
  let backoff = 1000;
  while (gen === state.gen) {
    const params = { room };
    if (state.lastEvent === null) {
      params.after = 'all';
      params.tail = String(TAIL);
    } else {
      params.after = String(state.lastEvent);
      params.after_msg = String(state.lastMsg || 0);
    }
    const ctrl = new AbortController();
    state.abort = ctrl;
    if (!state.online) setConn('connecting', 'connecting…');
    let fatal = null;
    try {
      const url = new URL('/v1/stream', location.origin);
      for (const [k, v] of Object.entries(params)) url.searchParams.set(k, v);
      const res = await fetch(url, {
        headers: { Authorization: 'Bearer ' + state.token, Accept: 'text/event-stream' },
        signal: ctrl.signal,
        cache: 'no-store',
      });
      if (res.status === 401) {
        fatal = 'refused';
      } else if (!res.ok) {
        let msg = 'HTTP ' + res.status;
        try {
          msg = (await res.json()).error.message;
        } catch (_) {
          /* keep the status */
        }
        if (res.status === 403 || res.status === 404) fatal = msg;
        else throw new Error(msg);
      } else {
        backoff = 1000;
        await readStream(res.body, ctrl, (name, data) => {
          if (gen === state.gen) handle(name, data);
        });
      }
    } catch (_) {
      /* dropped: reconnect below */
    }
    if (gen !== state.gen) return;
    if (fatal === 'refused') return setRefused();
    if (fatal) {
      state.online = false;
      $('app').classList.add('stale');
      setConn('error', 'no access');
      banner('bad', 'No access to #' + room + '.', fatal, null, null);
      return;
    }
    state.retryAt = Date.now() + backoff;
    setOffline();
    clearInterval(state.timers.offline);
    state.timers.offline = setInterval(renderOffline, 1000);
    await pause(backoff);
    clearInterval(state.timers.offline);
    state.retryAt = null;
    renderOffline();
    backoff = Math.min(backoff * 2, MAX_BACKOFF);
  }
}

/** Reads Server-Sent Events from a fetch body; gives up when it stalls. */
export async function readStream(body, ctrl, onEvent) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  let stall = setTimeout(() => ctrl.abort(), STALL_MS);
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      clearTimeout(stall);
      stall = setTimeout(() => ctrl.abort(), STALL_MS);
      buf += decoder.decode(value, { stream: true }).replace(/\r\n?/g, '\n');
      let cut;
      while ((cut = buf.indexOf('\n\n')) >= 0) {
        const block = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        let name = 'message';
        const data = [];
        for (const line of block.split('\n')) {
          if (line.startsWith(':')) continue;
          const i = line.indexOf(':');
          const field = i < 0 ? line : line.slice(0, i);
          let v = i < 0 ? '' : line.slice(i + 1);
          if (v.startsWith(' ')) v = v.slice(1);
          if (field === 'event') name = v;
          else if (field === 'data') data.push(v);
        }
        if (data.length) {
          let parsed;
          try {
            parsed = JSON.parse(data.join('\n'));
          } catch (_) {
            continue;
          }
          onEvent(name, parsed);
        }
      }
    }
  } finally {
    clearTimeout(stall);
  }
}

export function handle(name, data) {
  switch (name) {
    case 'ready':
      if (state.lastEvent === null) {
        state.lastEvent = 0;
        state.lastMsg = 0;
      }
      state.readyMsg = data.latest_message_id || 0;
      state.readyEvent = data.latest_event_id || 0;
      setOnline();
      break;
    case 'activity':
      addActivity(data);
      if (['message', 'task_created', 'task_cancelled', 'task_submitted', 'task_reviewed', 'file_added', 'file_deleted'].includes(data.kind)) {
        refreshRoomsSoon();
      }
      break;
    case 'chat':
      addMessage(data);
      break;
    case 'board':
      state.tasks = data.tasks || [];
      state.closed = data.closed || [];
      renderBoard();
      break;
    case 'files':
      state.files = data.files || [];
      renderFiles();
      renderBoard();
      break;
    case 'presence':
      presenceChanged(data);
      break;
    case 'error':
      setConn('error', (data.error && data.error.message) || 'stream error');
      break;
    default:
      break;
  }
}
