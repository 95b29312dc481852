// Drives the /ui dashboard in headless Chromium (playwright-core, the
// system's /usr/bin/chromium; never a downloaded browser). Run by
// tests/ui_browser.rs, which passes:
//   CHATROOM_UI_URL     the server's base URL
//   CHATROOM_UI_TOKEN   the token to paste
//   CHATROOM_UI_SHOTS   the folder for the screenshots
//   NODE_PATH           the folder holding playwright-core
// Protocol on stdio: the driver prints "WANT <step>" when it needs the test
// to act (create a task, post elsewhere, stop or start the server, revoke
// the token) and waits for one line back; at the end it prints
// "RESULT <json>". Any failure exits non-zero with the reason on stderr.
import { createRequire } from 'node:module';
import path from 'node:path';
import readline from 'node:readline';

const require = createRequire(import.meta.url);
const { chromium } = require('playwright-core');

const base = process.env.CHATROOM_UI_URL;
const token = process.env.CHATROOM_UI_TOKEN;
const shots = process.env.CHATROOM_UI_SHOTS;
const SIZES = [
  [390, 844],
  [768, 1024],
  [1280, 800],
  [1440, 900],
  [1920, 1080],
];

function fail(msg) {
  console.error('FAIL ' + msg);
  process.exit(1);
}

const lines = readline.createInterface({ input: process.stdin });
const queue = [];
const waiting = [];
lines.on('line', (l) => (waiting.length ? waiting.shift()(l) : queue.push(l)));
const nextLine = () => new Promise((resolve) => (queue.length ? resolve(queue.shift()) : waiting.push(resolve)));
async function want(step) {
  console.log('WANT ' + step);
  return nextLine();
}
const shot = (page, name) => page.screenshot({ path: path.join(shots, name + '.png') });

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--disable-background-networking', '--disable-component-update', '--no-first-run', '--disable-sync'],
});
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 }, deviceScaleFactor: 1 });
  const problems = [];
  page.on('pageerror', (e) => problems.push('page error: ' + e.message));
  page.on('console', (m) => {
    // A stopped server makes fetches fail on purpose; the rest must be clean.
    if (m.type() === 'error' && !/ERR_CONNECTION_REFUSED|Failed to load resource/.test(m.text())) problems.push('console error: ' + m.text());
  });
  const outside = [];
  page.on('request', (r) => {
    if (!r.url().startsWith(base) && !r.url().startsWith('blob:') && !r.url().startsWith('data:')) outside.push(r.url());
  });

  const response = await page.goto(base + '/ui', { waitUntil: 'load' });
  const csp = response.headers()['content-security-policy'] || '';
  if (!csp.includes("default-src 'self'") || csp.includes('unsafe-inline')) fail('no strict CSP: ' + csp);

  // The shell holds no data before a token is pasted.
  if (await page.isVisible('#app')) fail('the dashboard is visible before a token');
  const before = await page.textContent('body');
  if (before.includes('lobby')) fail('the page shell shows room data before a token');
  await shot(page, 'ui-login');

  await page.fill('#token', token);
  await page.click('#login-form button[type=submit]');
  await page.waitForSelector('#conn[data-state="live"]', { timeout: 15000 });
  await page.waitForSelector('#board .card', { timeout: 15000 });
  await page.waitForSelector('#chat .msg', { timeout: 15000 });
  if (!(await page.evaluate(() => location.hash)).includes('room=lobby')) fail('the room is not in the hash');

  // Markdown renders as elements.
  const mdCheck = await page.evaluate(() => {
    const msg = [...document.querySelectorAll('#chat .msg')].find((m) => m.textContent.includes('Release plan for'));
    if (!msg) return { found: false };
    const link = msg.querySelector('a[href^="https://git.example.org"]');
    const task = msg.querySelector('a.task-link');
    return {
      found: true,
      strong: !!msg.querySelector('.md strong'),
      list: msg.querySelectorAll('.md ul > li').length,
      code: !!msg.querySelector('.md pre > code'),
      inlineCode: !!msg.querySelector('.md p code, .md li code'),
      rawStars: msg.textContent.includes('**'),
      fences: msg.textContent.includes('```'),
      link: link ? { target: link.target, rel: link.rel } : null,
      task: task ? task.getAttribute('href') : null,
    };
  });
  if (!mdCheck.found) fail('the Markdown message is missing');
  if (!mdCheck.strong || mdCheck.list !== 2 || !mdCheck.code || !mdCheck.inlineCode || mdCheck.rawStars || mdCheck.fences) fail('Markdown did not render: ' + JSON.stringify(mdCheck));
  if (!mdCheck.link || mdCheck.link.target !== '_blank' || mdCheck.link.rel !== 'noopener noreferrer') fail('a link is not opened safely: ' + JSON.stringify(mdCheck));
  if (mdCheck.task !== '#room=lobby&task=1') fail('#1 is not a task link: ' + JSON.stringify(mdCheck));

  // A hostile message is inert and stays in its box.
  const xss = await page.evaluate(() => {
    const msg = [...document.querySelectorAll('#chat .msg')].find((m) => m.textContent.includes('AAAAAAAAAA'));
    if (!msg) return { found: false };
    const body = msg.querySelector('.body');
    const chat = document.getElementById('chat');
    const hrefs = [...document.querySelectorAll('#chat a[href], #board a[href], #info a[href]')].map((a) => a.getAttribute('href'));
    const handlers = [...document.querySelectorAll('#chat *, #board *')].filter((n) => [...n.attributes].some((a) => a.name.startsWith('on'))).length;
    return {
      found: true,
      shown: body.textContent.includes('<script>window.__pwned = 1</script>') && body.textContent.includes('<img src=x onerror='),
      scripts: document.querySelectorAll('#chat script, #board script, #activity script, #modal script').length,
      imgs: document.querySelectorAll('#chat img, #board img, #activity img').length,
      handlers,
      badLinks: hrefs.filter((h) => !/^(https?:|mailto:|#room=)/i.test(h)),
      pwned: typeof window.__pwned !== 'undefined',
      contained: body.scrollWidth <= body.clientWidth + 1 && msg.getBoundingClientRect().right <= chat.getBoundingClientRect().right + 1,
      chatScrolls: chat.scrollWidth > chat.clientWidth + 1,
      folded: body.classList.contains('folded') && body.clientHeight < 400 && !!msg.querySelector('button.more'),
    };
  });
  if (!xss.found) fail('the hostile message is missing');
  if (!xss.shown) fail('the hostile markup is not shown as text: ' + JSON.stringify(xss));
  if (xss.scripts || xss.imgs || xss.handlers || xss.badLinks.length || xss.pwned) fail('agent text became live markup: ' + JSON.stringify(xss));
  if (!xss.contained || xss.chatScrolls) fail('the long word breaks out of its box: ' + JSON.stringify(xss));
  if (!xss.folded) fail('a wall of text is not folded: ' + JSON.stringify(xss));

  // The same in a task's result (a 10,000-character word), in the sheet.
  await page.click('.col-closed .card:has-text("Check the hostile result")');
  await page.waitForSelector('#modal:not([hidden]) .md', { timeout: 5000 });
  const sheetXss = await page.evaluate(() => {
    const sheet = document.querySelector('#modal .sheet');
    return {
      shown: sheet.textContent.includes('<script>window.__pwned = 1</script>') && sheet.textContent.includes('A'.repeat(10000)),
      live: document.querySelectorAll('#modal script, #modal img, #modal [onerror]').length,
      pwned: typeof window.__pwned !== 'undefined',
      contained: sheet.scrollWidth <= sheet.clientWidth + 1,
    };
  });
  if (!sheetXss.shown || sheetXss.live || sheetXss.pwned || !sheetXss.contained) fail('the hostile result: ' + JSON.stringify(sheetXss));
  await shot(page, 'ui-task-hostile');
  await page.keyboard.press('Escape');

  const stored = await page.evaluate(() => ({
    session: sessionStorage.getItem('chatroom.token'),
    local: localStorage.length,
    cookies: document.cookie,
  }));
  if (stored.session !== token) fail('the token is not kept in sessionStorage');
  if (stored.local !== 0 || stored.cookies !== '') fail('the token leaked beyond sessionStorage');

  // A task created over MCP appears without a reload (a reload would lose
  // this mark; hash changes are not reloads).
  await page.evaluate(() => (window.__same_page = true));
  const title = (await want('task')).replace(/^TASK /, '');
  await page.waitForFunction(
    (t) => [...document.querySelectorAll('#board .card .title')].some((n) => n.textContent === t),
    title,
    { timeout: 15000 },
  );
  if (!(await page.evaluate(() => window.__same_page))) fail('the page reloaded');
  const column = await page.evaluate((t) => {
    const card = [...document.querySelectorAll('#board .card')].find((c) => c.querySelector('.title').textContent === t);
    return card.closest('.col').className;
  }, title);

  // Debug noise is gone; cancelled is apart from done; reserved is not held.
  const board = await page.evaluate(() => ({
    versions: [...document.querySelectorAll('#board .card')].filter((c) => /\bv\d+\b/.test(c.textContent)).length,
    dashes: [...document.querySelectorAll('#board .cards')].filter((c) => c.textContent.trim() === '—').length,
    doneHasCancelled: [...document.querySelectorAll('.col-closed .cards > .card')].some((c) => c.classList.contains('st-cancelled')),
    cancelledBox: !!document.querySelector('.col-closed details.cancelled-box:not([open]) .card.st-cancelled'),
  }));
  if (board.versions || board.dashes) fail('debug noise on the board: ' + JSON.stringify(board));
  const reserved = await page.evaluate(() => [...document.querySelectorAll('.col-pending .card .reserved')].map((n) => n.textContent));
  if (!reserved.includes('reserved for dave')) fail('a reserved task does not say so: ' + JSON.stringify(reserved));
  if (board.doneHasCancelled || !board.cancelledBox) fail('cancelled tasks are not apart and collapsed: ' + JSON.stringify(board));

  // Another room counts its unread messages and mentions of the reader
  // (from where the dashboard first saw it).
  await page.waitForFunction(() => JSON.parse(sessionStorage.getItem('chatroom.seen') || '{}').infra !== undefined, null, { timeout: 10000 });
  // Scrolled up in the chat, a new message shows a pill instead of moving.
  await page.evaluate(() => (document.getElementById('chat').scrollTop = 0));
  await want('unread');
  await page.waitForSelector('#new-pill:not([hidden])', { timeout: 10000 });
  const pill = await page.evaluate(() => ({ text: document.getElementById('new-pill').textContent, top: document.getElementById('chat').scrollTop }));
  if (!pill.text.includes('1 new message') || pill.top !== 0) fail('the new-messages pill: ' + JSON.stringify(pill));
  await page.click('#new-pill');
  await page.waitForSelector('#new-pill', { state: 'hidden', timeout: 5000 });
  if (!(await page.evaluate(() => [...document.querySelectorAll('#chat .msg')].pop().getBoundingClientRect().bottom <= document.getElementById('chat').getBoundingClientRect().bottom + 1))) fail('the pill did not bring the last message into view');
  await page.waitForSelector('#rooms li[data-room="infra"] .unread .badge.bad', { timeout: 20000 });
  const unread = await page.evaluate(() => document.querySelector('#rooms li[data-room="infra"] .unread').textContent);
  if (!unread.includes('@1') || !unread.includes('2')) fail('unread counts of infra: ' + unread);

  // The task sheet: history from the events, reserved/held, why blocked.
  const blocked = await page.evaluate(() => document.querySelector('.col-blocked .card').dataset.task);
  await page.click(`.col-blocked .card[data-task="${blocked}"]`);
  await page.waitForSelector('#modal:not([hidden]) .history li', { timeout: 5000 });
  const sheet = await page.evaluate(() => ({
    hash: location.hash,
    why: document.querySelector('#modal .why').textContent,
    history: [...document.querySelectorAll('#modal .history li')].map((l) => l.textContent),
    may: document.querySelector('#modal .kvs').textContent,
  }));
  // A read-only token may take no action: the server's `can` is empty.
  if (!sheet.may.includes('your token mayonly look')) fail('what the token may do: ' + sheet.may);
  if (!sheet.hash.includes('task=' + blocked)) fail('the open task is not in the hash: ' + sheet.hash);
  if (!sheet.why.includes('Blocked by carol') || !sheet.why.includes('upstream fix')) fail('why it is blocked: ' + sheet.why);
  if (!sheet.history.some((h) => h.includes('carol') && h.includes('claimed'))) fail('history: ' + JSON.stringify(sheet.history));
  await shot(page, 'ui-task-blocked');
  await page.keyboard.press('Escape');

  // A task's files are in its sheet; a held task counts its lease down.
  await page.click('.col-in_progress .card:has-text("Benchmark WAL")');
  await page.waitForSelector('#modal:not([hidden]) .task-files li', { timeout: 5000 });
  const files = await page.textContent('#modal .task-files');
  if (!files.includes('wal-bench.csv')) fail('the task sheet lacks its file: ' + files);
  await page.keyboard.press('Escape');
  await page.click('.col-in_progress .card:has-text("Fix the flaky")');
  await page.waitForSelector('#modal:not([hidden]) .lease-left', { timeout: 5000 });
  const lease1 = await page.textContent('#modal .lease-left');
  await page.waitForFunction((t) => document.querySelector('#modal .lease-left').textContent !== t, lease1, { timeout: 5000 });
  if (!/\d+m \d+s left/.test(lease1)) fail('the lease countdown: ' + lease1);
  await page.keyboard.press('Escape');
  await page.waitForSelector('#modal[hidden]', { state: 'attached' });

  // Every size: no sideways scroll; wide sizes show every column header;
  // the phone reaches chat and activity through tabs, the rooms by a button.
  const layouts = {};
  for (const [width, height] of SIZES) {
    await page.setViewportSize({ width, height });
    await page.waitForTimeout(250);
    const l = await page.evaluate(() => {
      const vw = window.innerWidth;
      const heads = [...document.querySelectorAll('#board .col-head')].map((h) => {
        const r = h.getBoundingClientRect();
        const hit = document.elementFromPoint(Math.min(r.left + 12, vw - 1), r.top + r.height / 2);
        return { left: r.left, right: r.right, width: r.width, top: r.top, hit: !!hit && h.contains(hit) };
      });
      return {
        vw,
        scrollWidth: document.documentElement.scrollWidth,
        bodyScroll: document.body.scrollWidth,
        heads,
        tabs: getComputedStyle(document.querySelector('.tabs')).display !== 'none',
        chatVisible: document.getElementById('chat').getBoundingClientRect().width > 0,
        sideVisible: getComputedStyle(document.getElementById('side')).visibility !== 'hidden' && document.getElementById('side').getBoundingClientRect().right > 0,
        forget: document.getElementById('forget').getBoundingClientRect().right <= vw,
      };
    });
    layouts[width] = l;
    if (l.scrollWidth > l.vw || l.bodyScroll > l.vw) fail(`sideways scroll at ${width}px: ${JSON.stringify(l)}`);
    if (!l.forget) fail(`the sign-out button is off-screen at ${width}px`);
    if (width >= 1280) {
      if (l.tabs) fail(`tabs at ${width}px`);
      if (!l.chatVisible) fail(`chat not beside the board at ${width}px`);
      for (const h of l.heads) {
        if (!(h.width > 60 && h.left >= 0 && h.right <= l.vw && h.top >= 0 && h.hit)) fail(`a column header is not visible at ${width}px: ${JSON.stringify(l.heads)}`);
      }
    }
    await shot(page, `ui-${width}x${height}`);
    if (width < 1280) {
      if (!l.tabs) fail(`no tabs at ${width}px`);
      if (l.sideVisible) fail(`the sidebar covers the board at ${width}px`);
      await page.click('.tab[data-tab="chat"]');
      await page.waitForSelector('#chat .msg', { state: 'visible', timeout: 5000 });
      const chatBox = await page.evaluate(() => {
        const c = document.getElementById('chat').getBoundingClientRect();
        return { width: c.width, height: c.height, scroll: document.documentElement.scrollWidth, vw: innerWidth };
      });
      if (chatBox.width < width * 0.9 || chatBox.height < 200) fail(`chat too small at ${width}px: ${JSON.stringify(chatBox)}`);
      if (chatBox.scroll > chatBox.vw) fail(`sideways scroll in chat at ${width}px`);
      await shot(page, `ui-${width}x${height}-chat`);
      await page.click('.tab[data-tab="activity"]');
      await page.waitForSelector('#activity .act', { state: 'visible', timeout: 5000 });
      await page.click('#side-toggle');
      await page.waitForSelector('#rooms li[data-room="infra"]', { state: 'visible', timeout: 5000 });
      await page.waitForFunction(() => document.getElementById('side').getBoundingClientRect().left >= 0);
      await page.waitForTimeout(250);
      if ((await page.evaluate(() => document.documentElement.scrollWidth)) > width) fail(`the drawer scrolls the page at ${width}px`);
      await shot(page, `ui-${width}x${height}-rooms`);
      await page.click('#scrim', { position: { x: width - 10, y: 300 } });
      await page.waitForFunction(() => !document.getElementById('app').classList.contains('side-open'));
      await page.click('.tab[data-tab="board"]');
    }
  }

  // The dark scheme at a laptop's size, and the sidebar folded away.
  await page.setViewportSize({ width: 1440, height: 900 });
  await page.emulateMedia({ colorScheme: 'dark' });
  await page.waitForTimeout(150);
  await shot(page, 'ui-1440x900-dark');
  await page.click('#side-toggle');
  await page.waitForFunction(() => document.getElementById('app').classList.contains('side-collapsed'));
  const folded = await page.evaluate(() => document.querySelector('.col-closed .col-head').getBoundingClientRect().width);
  if (!(folded > layouts[1440].heads[4].width)) fail('folding the sidebar gives the board no room');
  await shot(page, 'ui-1440x900-folded');
  await page.click('#side-toggle');
  await page.emulateMedia({ colorScheme: 'light' });

  // The hash switches rooms, and back; a #N link opens the task.
  await page.evaluate(() => (location.hash = '#room=infra'));
  await page.waitForFunction(() => document.getElementById('room-title').textContent === '#infra', null, { timeout: 5000 });
  await page.waitForFunction(() => [...document.querySelectorAll('#chat .msg')].some((m) => m.textContent.includes('infra dashboard')), null, { timeout: 10000 });
  if (await page.isVisible('#rooms li[data-room="infra"] .unread')) fail('the room just opened still counts unread messages');
  await page.evaluate(() => (location.hash = '#room=lobby'));
  await page.waitForFunction(() => document.getElementById('room-title').textContent === '#lobby', null, { timeout: 5000 });
  await page.waitForSelector('#chat a.task-link', { timeout: 10000 });
  await page.click('#chat a.task-link');
  await page.waitForSelector('#modal:not([hidden]) .history', { timeout: 5000 });
  if (!(await page.textContent('#modal-title')).includes('migration guide')) fail('#1 opened the wrong task');
  await page.keyboard.press('Escape');
  if (!(await page.evaluate(() => window.__same_page))) fail('switching rooms reloaded the page');

  // The server stops: a banner says so, the data greys, a task says why it
  // cannot load; the server returns: the banner goes.
  await want('stop');
  await page.waitForSelector('#banner[data-kind="offline"]:not([hidden])', { timeout: 15000 });
  if (!(await page.evaluate(() => document.getElementById('app').classList.contains('stale')))) fail('the stale data is not greyed');
  await page.click('.col-pending .card >> nth=0');
  await page.waitForSelector('#modal:not([hidden]) .warn', { timeout: 5000 });
  const offlineSheet = await page.textContent('#modal .warn');
  if (!offlineSheet.includes('unreachable')) fail('an offline task does not say why: ' + offlineSheet);
  await shot(page, 'ui-offline');
  await page.keyboard.press('Escape');
  await want('start');
  await page.waitForSelector('#banner', { state: 'hidden', timeout: 20000 });
  await page.waitForSelector('#conn[data-state="live"]', { timeout: 5000 });
  if (await page.evaluate(() => document.getElementById('app').classList.contains('stale'))) fail('still greyed when live again');

  // A revoked token: the refused banner, with the way to another token.
  await want('revoke');
  await page.waitForSelector('#banner[data-kind="bad"]:not([hidden])', { timeout: 20000 });
  const refused = await page.textContent('#banner');
  if (!refused.includes('Token refused')) fail('the refused banner: ' + refused);
  if (!(await page.isVisible('#board .card'))) fail('the last data is gone after a refusal');
  await shot(page, 'ui-refused');

  const writes = await page.evaluate(() => document.querySelectorAll('textarea, input:not(#token), [contenteditable]').length);
  if (writes) fail('the dashboard has input fields besides the token');
  if (outside.length) fail('requests outside the server: ' + outside.join(', '));
  if (problems.length) fail(problems.join('; '));
  console.log('RESULT ' + JSON.stringify({ column, xss, layouts: Object.fromEntries(Object.entries(layouts).map(([k, v]) => [k, v.scrollWidth])) }));
} finally {
  await browser.close();
  lines.close();
}
