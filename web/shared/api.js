// Calls to this server's JSON API (/v1, /v1/admin) with a bearer token: the
// one helper the dashboard and the console share. The token goes only in
// the Authorization header, to this origin; no cookie is ever sent.
//
// An ES module served at /assets/api.js.

/** A refused or failed call: the HTTP status (0 when the server did not
 * answer), the error code and the server's message. */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/**
 * Calls `path` with `token`: `method` (GET), query `params`, a JSON `body`.
 * Resolves to the answer's JSON; rejects with an ApiError.
 */
export async function api(token, path, { method = 'GET', params, body } = {}) {
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== undefined && v !== null) url.searchParams.set(k, v);
  }
  const headers = { Authorization: 'Bearer ' + (token || ''), Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let res;
  try {
    res = await fetch(url, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: 'omit',
      cache: 'no-store',
    });
  } catch (_) {
    throw new ApiError(0, 'unreachable', 'the server is unreachable');
  }
  let data = null;
  try {
    data = await res.json();
  } catch (_) {
    data = null;
  }
  if (!res.ok) {
    const err = (data && data.error) || {};
    throw new ApiError(res.status, err.code || 'http_' + res.status, err.message || 'HTTP ' + res.status);
  }
  return data;
}
