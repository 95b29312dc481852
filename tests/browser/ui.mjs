// Drives the /ui dashboard in headless Chromium (playwright-core, the
// system's /usr/bin/chromium; never a downloaded browser). Run by
// tests/ui_browser.rs, which passes:
//   CHATROOM_UI_URL     the server's base URL
//   CHATROOM_UI_TOKEN   the token to paste
//   CHATROOM_UI_SHOT    where to save the screenshot
//   NODE_PATH           the folder holding playwright-core
// Protocol on stdio: prints "READY" once the live dashboard shows the seeded
// room, then waits for a line "GO <task title>" on stdin, checks that the
// task appears without a reload, saves the screenshot and prints
// "RESULT <json>". Any failure exits non-zero with the reason on stderr.
import { createRequire } from 'node:module';
import readline from 'node:readline';

const require = createRequire(import.meta.url);
const { chromium } = require('playwright-core');

const base = process.env.CHATROOM_UI_URL;
const token = process.env.CHATROOM_UI_TOKEN;
const shot = process.env.CHATROOM_UI_SHOT;

function fail(msg) {
  console.error('FAIL ' + msg);
  process.exit(1);
}

const lines = readline.createInterface({ input: process.stdin });
const nextLine = () => new Promise((resolve) => lines.once('line', resolve));

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--disable-background-networking', '--disable-component-update', '--no-first-run', '--disable-sync'],
});
try {
  const page = await browser.newPage({ viewport: { width: 1680, height: 980 }, deviceScaleFactor: 1 });
  const problems = [];
  page.on('pageerror', (e) => problems.push('page error: ' + e.message));
  page.on('console', (m) => {
    if (m.type() === 'error') problems.push('console error: ' + m.text());
  });
  let navigations = 0;
  page.on('framenavigated', (f) => {
    if (f === page.mainFrame()) navigations++;
  });

  const response = await page.goto(base + '/ui', { waitUntil: 'load' });
  const csp = response.headers()['content-security-policy'] || '';
  if (!csp.includes("default-src 'self'")) fail('no strict CSP: ' + csp);

  // The shell holds no data before a token is pasted.
  if (await page.isVisible('#app')) fail('the dashboard is visible before a token');
  const before = await page.textContent('body');
  if (before.includes('lobby')) fail('the page shell shows room data before a token');

  await page.fill('#token', token);
  await page.click('#login-form button[type=submit]');
  await page.waitForSelector('#conn[data-state="live"]', { timeout: 15000 });
  await page.waitForSelector('#board .card', { timeout: 15000 });
  await page.waitForSelector('#chat .msg', { timeout: 15000 });

  // Agent-written markup is text, never HTML.
  const xss = await page.evaluate(() => {
    const bodies = [...document.querySelectorAll('#chat .msg .body')].map((b) => b.textContent);
    return {
      shown: bodies.some((t) => t.includes('<script>window.__pwned = 1</script>')),
      scripts: document.querySelectorAll('#chat script, #board script, #activity script').length,
      imgs: document.querySelectorAll('#chat img, #board img').length,
      pwned: typeof window.__pwned !== 'undefined',
    };
  });
  if (!xss.shown) fail('the <script> message is not shown as text');
  if (xss.scripts || xss.imgs || xss.pwned) fail('agent text became markup: ' + JSON.stringify(xss));

  const stored = await page.evaluate(() => ({
    session: sessionStorage.getItem('chatroom.token'),
    local: localStorage.length,
    cookies: document.cookie,
  }));
  if (stored.session !== token) fail('the token is not kept in sessionStorage');
  if (stored.local !== 0 || stored.cookies !== '') fail('the token leaked beyond sessionStorage');

  const navsBefore = navigations;
  console.log('READY');
  const go = await nextLine();
  const title = go.replace(/^GO /, '');
  await page.waitForFunction(
    (t) => [...document.querySelectorAll('#board .card .title')].some((n) => n.textContent === t),
    title,
    { timeout: 15000 },
  );
  if (navigations !== navsBefore) fail('the page reloaded');
  const column = await page.evaluate((t) => {
    const card = [...document.querySelectorAll('#board .card')].find((c) => c.querySelector('.title').textContent === t);
    return card.closest('.col').className;
  }, title);

  // Let the new card's row settle, then keep a picture for people to look at.
  await page.waitForTimeout(300);
  await page.screenshot({ path: shot, fullPage: false });

  // The task sheet opens read-only from a card.
  await page.click('#board .card >> nth=0');
  await page.waitForSelector('#modal:not([hidden]) h3', { timeout: 5000 });
  await page.screenshot({ path: shot.replace(/\.png$/, '-task.png') });
  await page.keyboard.press('Escape');

  const writes = await page.evaluate(() => document.querySelectorAll('textarea, input:not(#token), [contenteditable]').length);
  if (writes) fail('the dashboard has input fields besides the token');
  if (problems.length) fail(problems.join('; '));
  console.log('RESULT ' + JSON.stringify({ column, navigations, xss }));
} finally {
  await browser.close();
  lines.close();
}
