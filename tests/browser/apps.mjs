// Hosts the board app (ui://chatroom/board) in headless Chromium the way an
// MCP Apps host does, and drives it. Run by tests/apps_browser.rs with:
//   CHATROOM_APP_URL      the server's base URL
//   CHATROOM_APP_TOKENS   JSON {writer, lead, observer}: tokens to host as
//   CHATROOM_APP_SHOTS    the folder for the screenshots
//   NODE_PATH             the folder holding playwright-core
// The host side is the package's own AppBridge (tests/browser/vendor, see
// its README), inlined into a blank host page. As a host, this script reads
// the tool list, finds show_board's `_meta.ui.resourceUri`, reads that
// resource, applies its `_meta.ui.csp` as the frame's policy, renders it in
// an iframe sandboxed to scripts only (an opaque origin: no cookies, no
// storage, no access to the host), calls show_board and hands its result
// to the app; every `tools/call` the app makes through the bridge is sent
// to the server with the host's token, which never enters the browser.
// At the end it prints "RESULT <json>"; any failure exits non-zero.
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
const { chromium } = require('playwright-core');

const base = process.env.CHATROOM_APP_URL;
const tokens = JSON.parse(process.env.CHATROOM_APP_TOKENS);
const shots = process.env.CHATROOM_APP_SHOTS;
const here = path.dirname(fileURLToPath(import.meta.url));
const HOST_JS = fs.readFileSync(path.join(here, 'vendor/ext-apps-host.iife.js'), 'utf8');

function fail(msg) {
  console.error('FAIL ' + msg);
  process.exit(1);
}

let rpcId = 0;
async function rpc(token, method, params) {
  const res = await fetch(base + '/mcp', {
    method: 'POST',
    headers: { authorization: 'Bearer ' + token, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: JSON.stringify({ jsonrpc: '2.0', id: ++rpcId, method, params }),
  });
  const v = await res.json();
  if (v.error) throw new Error(method + ': ' + JSON.stringify(v.error));
  return v.result;
}

/** The CSP a host derives from `_meta.ui.csp` (every list empty here). */
function policy(csp) {
  const list = (xs) => (xs && xs.length ? ' ' + xs.join(' ') : '');
  const res = list(csp?.resourceDomains);
  return [
    "default-src 'none'",
    "script-src 'unsafe-inline'" + res,
    "style-src 'unsafe-inline'" + res,
    'img-src data:' + res,
    'font-src data:' + res,
    'media-src data:' + res,
    'connect-src' + (list(csp?.connectDomains) || " 'none'"),
    'frame-src' + (list(csp?.frameDomains) || " 'none'"),
    'base-uri' + (list(csp?.baseUriDomains) || " 'none'"),
    "form-action 'none'",
  ].join('; ');
}

const HOST_PAGE = `<!doctype html><html><head><meta charset="utf-8"><title>test host</title>
<style>html,body{margin:0;padding:0;background:#888} iframe{display:block;width:100%;border:0;height:600px}</style>
</head><body><script>${HOST_JS.replace(/<\/script/g, '<\\/script')}</script>
<script>
window.__opened = [];
window.__told = [];
window.startApp = async function (html, csp, input, result, theme) {
  const { AppBridge, PostMessageTransport } = McpExtAppsHost;
  const frame = document.createElement('iframe');
  frame.setAttribute('sandbox', 'allow-scripts');
  frame.setAttribute('title', 'chatroom board');
  document.body.append(frame);
  const bridge = new AppBridge(null, { name: 'test-host', version: '1.0.0' },
    { serverTools: {}, openLinks: {}, logging: {}, updateModelContext: { text: {} } },
    { hostContext: { theme, displayMode: 'inline', availableDisplayModes: ['inline'], platform: 'web', locale: 'en-GB',
      containerDimensions: { width: document.documentElement.clientWidth, maxHeight: 4000 } } });
  bridge.oncalltool = (params) => window.hostCallTool(params);
  bridge.onopenlink = async ({ url }) => { window.__opened.push(url); return {}; };
  bridge.onupdatemodelcontext = async (p) => { window.__told.push((p.content || []).map((c) => c.text).join(' ')); return {}; };
  bridge.onsizechange = ({ height }) => { if (height) frame.style.height = Math.ceil(height) + 'px'; };
  bridge.oninitialized = async () => {
    await bridge.sendToolInput({ arguments: input });
    await bridge.sendToolResult(result);
  };
  window.__bridge = bridge;
  await bridge.connect(new PostMessageTransport(frame.contentWindow, frame.contentWindow));
  const meta = '<meta http-equiv="Content-Security-Policy" content="' + csp + '">';
  frame.srcdoc = html.replace(/<head>/i, '<head>' + meta);
};
</script></body></html>`;

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  // Sandboxed frames in their own process paint late into headless
  // screenshots; in-process they are the same opaque-origin sandbox.
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--disable-background-networking', '--disable-component-update', '--no-first-run', '--disable-sync', '--disable-features=IsolateSandboxedIframes'],
});
const out = {};
const problems = [];
const outside = [];

/** Opens the app as `who` at `width`; returns the page and the app's frame. */
async function host(who, width, theme = 'light') {
  const token = tokens[who];
  const page = await browser.newPage({ viewport: { width, height: 900 }, deviceScaleFactor: 1 });
  page.on('pageerror', (e) => problems.push(who + ': page error: ' + e.message));
  page.on('console', (m) => {
    if (m.type() === 'error' || /Content Security Policy/i.test(m.text())) problems.push(who + ': console: ' + m.text());
  });
  page.on('request', (r) => {
    if (!/^(data:|about:)/.test(r.url())) outside.push(r.url());
  });
  await page.exposeFunction('hostCallTool', async (params) => rpc(token, 'tools/call', params));
  await page.setContent(HOST_PAGE);
  // What a host does when the model calls show_board.
  const listed = await rpc(token, 'tools/list', {});
  const tool = listed.tools.find((t) => t.name === 'show_board');
  const uri = tool?._meta?.ui?.resourceUri;
  if (uri !== 'ui://chatroom/board') fail('show_board has no ui resource: ' + JSON.stringify(tool?._meta));
  const read = await rpc(token, 'resources/read', { uri });
  const doc = read.contents[0];
  if (doc.mimeType !== 'text/html;profile=mcp-app') fail('mime type ' + doc.mimeType);
  if (doc.text.includes(token)) fail('the token is in the document');
  const result = await rpc(token, 'tools/call', { name: 'show_board', arguments: {} });
  await page.evaluate(([html, csp, res, th]) => window.startApp(html, csp, {}, res, th), [doc.text, policy(doc._meta?.ui?.csp), result, theme]);
  const frame = await (await page.waitForSelector('iframe')).contentFrame();
  await frame.waitForSelector('body[data-ready="true"]', { timeout: 20000 });
  await frame.waitForSelector('#board .card', { timeout: 20000 });
  return { page, frame };
}

/** A screenshot of the app once its frame has the height the app asked
 * for and has painted it. */
async function shot(page, name) {
  const frame = page.frames()[1];
  const want = await frame.evaluate(() => Math.ceil(document.documentElement.getBoundingClientRect().height));
  await page.waitForFunction((h) => Math.abs(document.querySelector('iframe').getBoundingClientRect().height - h) <= 2, want);
  const painted = () => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  await frame.evaluate(painted);
  await page.evaluate(painted);
  await page.locator('iframe').screenshot({ path: path.join(shots, name + '.png'), animations: 'disabled', caret: 'hide' });
}

const cardIn = (frame, status, title) => frame.locator(`.col[data-status="${status}"] .card`, { hasText: title });

async function noSideways(frame, what) {
  const [sw, w] = await frame.evaluate(() => [document.documentElement.scrollWidth, window.innerWidth]);
  if (sw > w + 1) fail(`${what}: the app scrolls sideways (${sw} > ${w})`);
}

async function inert(page, frame, who) {
  const pwned = await frame.evaluate(() => window.__pwned);
  const hostPwned = await page.evaluate(() => window.__pwned);
  if (pwned !== undefined || hostPwned !== undefined) fail(who + ': hostile text ran: ' + pwned + '/' + hostPwned);
  const bad = await frame.evaluate(() => ({
    imgs: document.querySelectorAll('#main img, #detail img').length,
    scripts: document.querySelectorAll('#main script, #detail script').length,
    handlers: [...document.querySelectorAll('#main *, #detail *')].filter((e) => [...e.attributes].some((a) => a.name.startsWith('on'))).length,
    js: document.querySelectorAll('a[href^="javascript"]').length,
  }));
  if (bad.imgs || bad.scripts || bad.handlers || bad.js) fail(who + ': hostile markup survived: ' + JSON.stringify(bad));
}

try {
  // ---- a writer at 1280: the board, chat, activity; claim, note, post ----
  {
    const { page, frame } = await host('writer', 1280);
    for (const s of ['pending', 'in_progress', 'blocked', 'in_review', 'done', 'cancelled']) {
      if (!(await frame.isVisible(`.col[data-status="${s}"]`))) fail('no visible column ' + s);
    }
    if ((await frame.locator('#messages .msg').count()) < 2) fail('the chat did not render');
    if ((await frame.locator('#messages .replies .msg').count()) < 1) fail('the thread did not render');
    if ((await frame.locator('#events li').count()) < 3) fail('the activity did not render');
    if (!(await frame.locator('#messages .md strong', { hasText: 'bold' }).count())) fail('Markdown did not render');
    if ((await frame.textContent('#me')) !== '@bob') fail('whoami not shown');
    await inert(page, frame, 'writer');
    await noSideways(frame, 'writer 1280');
    await shot(page, 'app-1280');

    // Claim from the card: it lands on the server with bob as holder.
    await cardIn(frame, 'pending', 'Claim me').locator('button[data-act="claim"]').click();
    await cardIn(frame, 'in_progress', 'Claim me').waitFor({ timeout: 15000 });
    const holder = await cardIn(frame, 'in_progress', 'Claim me').locator('[data-assignee]').getAttribute('data-assignee');
    if (holder !== 'bob') fail('claimed card shows holder ' + holder);

    // A note and a release from the task's panel.
    await cardIn(frame, 'in_progress', 'Claim me').click();
    await frame.waitForSelector('#detail:not([hidden]) button[data-act="release"]');
    await frame.fill('#note-body', 'Started on it from the **chat app**.');
    await frame.click('#detail button[data-act="note"]');
    await frame.locator('#detail .notes .msg', { hasText: 'Started on it' }).waitFor({ timeout: 15000 });
    await frame.click('#detail-close');

    // Claim and release: back to pending, holder cleared.
    await cardIn(frame, 'pending', 'WWWW').locator('button[data-act="claim"]').click();
    await cardIn(frame, 'in_progress', 'WWWW').click();
    await frame.click('#detail button[data-act="release"]');
    await cardIn(frame, 'pending', 'WWWW').waitFor({ timeout: 15000 });
    if (await cardIn(frame, 'pending', 'WWWW').locator('[data-assignee]').count()) fail('a released task keeps its holder');
    await frame.click('#detail-close');

    // A reply in the chat, threaded under the first message.
    await frame.locator('#messages .msg', { hasText: 'Plan for today' }).locator('button.reply').first().click();
    await frame.fill('#message-body', 'On it, from the app.');
    await frame.click('#send');
    await frame.locator('#messages .replies .msg', { hasText: 'On it, from the app.' }).waitFor({ timeout: 15000 });
    // No approve for a plain writer on someone else's task.
    if (await cardIn(frame, 'in_review', 'Ship the docs').locator('button[data-act="approve"]').count()) fail('a writer may approve');
    await page.close();
  }

  // ---- the same writer on a phone-wide frame, dark theme ----
  {
    const { page, frame } = await host('writer', 390, 'dark');
    if ((await frame.getAttribute('html', 'data-theme')) !== 'dark') fail('the host theme was not applied');
    const bg = await frame.evaluate(() => getComputedStyle(document.body).backgroundColor);
    if (bg !== 'rgb(14, 16, 22)') fail('dark theme background is ' + bg);
    await noSideways(frame, 'writer 390 board');
    await shot(page, 'app-390');
    await frame.click('#tabs [data-tab="chat"]');
    await frame.waitForSelector('#chat #messages .msg', { state: 'visible' });
    await noSideways(frame, 'writer 390 chat');
    await shot(page, 'app-390-chat');
    // The host switches to light: the app follows.
    await page.evaluate(() => window.__bridge.setHostContext({ ...window.__bridge.getHostContext?.(), theme: 'light' }));
    await frame.waitForFunction(() => document.documentElement.dataset.theme === 'light');
    await page.close();
  }

  // ---- the lead: approve one submitted task, reject another with a note ----
  {
    const { page, frame } = await host('lead', 1280);
    if (!(await frame.locator('#flags .badge', { hasText: 'lead' }).isVisible())) fail('lead badge missing');
    await cardIn(frame, 'in_review', 'Ship the docs').locator('button[data-act="approve"]').click();
    await cardIn(frame, 'done', 'Ship the docs').waitFor({ timeout: 15000 });
    await cardIn(frame, 'in_review', 'Tidy the logs').click();
    await frame.waitForSelector('#detail:not([hidden]) button[data-act="reject"]');
    await frame.click('#detail button[data-act="reject"]');
    await frame.waitForSelector('#problem:not([hidden])');
    if (!(await frame.textContent('#problem')).includes('needs a note')) fail('reject without a note was not stopped');
    await frame.fill('#note-body', 'Keep the request ids, please.');
    await frame.click('#detail button[data-act="reject"]');
    await cardIn(frame, 'pending', 'Tidy the logs').waitFor({ timeout: 15000 });
    await frame.click('#detail-close');
    await inert(page, frame, 'lead');
    // After each act, the model is told what the person did.
    out.told = await page.evaluate(() => window.__told);
    if (!out.told.some((t) => t.includes('approved task #')) || !out.told.some((t) => t.includes('sent task #')))
      fail('the model was not told of the review: ' + JSON.stringify(out.told));
    await shot(page, 'app-lead-1280');
    // A host that fixes the frame's height (here 420 px, the document
    // scrolled inside it): the panel opens inside the visible frame.
    await page.evaluate(() => { const f = document.querySelector('iframe'); f.style.height = '420px'; window.__bridge.onsizechange = () => {}; });
    await frame.evaluate(() => window.scrollTo(0, document.documentElement.scrollHeight));
    await frame.locator('#activity, #board .card').last().scrollIntoViewIfNeeded().catch(() => {});
    const last = frame.locator('#board .card').last();
    await last.click();
    await frame.waitForSelector('#detail:not([hidden])');
    const placed = await frame.evaluate(() => {
      const r = document.querySelector('#detail .detail-card').getBoundingClientRect();
      return { top: r.top, height: window.innerHeight };
    });
    out.panel_fixed_frame = placed;
    if (placed.top < 0 || placed.top > placed.height - 40) fail('the panel opened outside the visible frame: ' + JSON.stringify(placed));
    await page.screenshot({ path: path.join(shots, 'app-lead-fixed-frame.png') });
    await frame.click('#detail-close');
    await page.close();
  }

  // ---- a read-only token: it sees everything and is offered nothing ----
  {
    const { page, frame } = await host('observer', 390);
    await frame.waitForSelector('#readonly-banner:not([hidden])');
    const offers = await frame.evaluate(() => ({
      acts: document.querySelectorAll('button[data-act]').length,
      replies: document.querySelectorAll('button.reply').length,
      composer: !document.getElementById('composer').hidden,
    }));
    if (offers.acts || offers.replies || offers.composer) fail('a read-only app offers writes: ' + JSON.stringify(offers));
    await frame.locator('.card').first().click();
    await frame.waitForSelector('#detail:not([hidden])');
    if (await frame.locator('#detail textarea, #detail button[data-act]').count()) fail('read-only task panel offers writes');
    if ((await frame.textContent('#detail-body')).includes('null')) fail('the task panel shows a missing field as null');
    await shot(page, 'app-readonly-390');
    await frame.click('#detail-close');
    // A link in agent text goes to the host, never navigates the frame.
    await frame.click('#tabs [data-tab="chat"]');
    await frame.locator('#messages a[href^="https://"]').first().click();
    // The request travels to the host by postMessage: wait for it to land.
    await page.waitForFunction(() => (window.__opened || []).length > 0, null, { timeout: 10000 }).catch(() => {});
    const opened = await page.evaluate(() => window.__opened || []);
    if (!opened.length || !opened[0].startsWith('https://')) fail('the link did not go through the host: ' + JSON.stringify(opened));
    await page.close();
  }

  if (outside.length) fail('requests left the frame: ' + outside.join(', '));
  if (problems.length) fail(problems.join('\n'));
  out.ok = true;
  console.log('RESULT ' + JSON.stringify(out));
} catch (e) {
  // The frame as it was, for whoever reads the failure.
  for (const ctx of browser.contexts()) for (const p of ctx.pages()) {
    await p.screenshot({ path: path.join(shots, 'failure.png'), fullPage: true }).catch(() => {});
    const frame = p.frames()[1];
    if (frame) console.error('problem banner: ' + (await frame.textContent('#problem').catch(() => '?')));
  }
  fail(e.stack || String(e));
} finally {
  await browser.close();
}
