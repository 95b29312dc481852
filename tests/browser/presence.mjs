// The dashboard's agents list with presence states, in headless Chromium
// (playwright-core, the system's /usr/bin/chromium). Run by
// tests/ui_browser.rs, which passes CHATROOM_UI_URL, CHATROOM_UI_TOKEN,
// CHATROOM_UI_SHOTS and NODE_PATH. Protocol on stdio: "WANT change" when
// the test should change an agent's state (it answers one line), then
// "RESULT <json>" with what each agent's row showed.
import { createRequire } from 'node:module';
import path from 'node:path';
import readline from 'node:readline';

const require = createRequire(import.meta.url);
const { chromium } = require('playwright-core');

const base = process.env.CHATROOM_UI_URL;
const token = process.env.CHATROOM_UI_TOKEN;
const shots = process.env.CHATROOM_UI_SHOTS;

function fail(msg) {
  console.error('FAIL ' + msg);
  process.exit(1);
}

const lines = readline.createInterface({ input: process.stdin });
const queue = [];
const waiting = [];
lines.on('line', (l) => (waiting.length ? waiting.shift()(l) : queue.push(l)));
const nextLine = () => new Promise((resolve) => (queue.length ? resolve(queue.shift()) : waiting.push(resolve)));
const shot = (page, name) => page.screenshot({ path: path.join(shots, name + '.png') });

/** Each agent row: name, state, the text shown, its tags. */
const rows = (page) =>
  page.evaluate(() =>
    Object.fromEntries(
      [...document.querySelectorAll('#agents li.agent')].map((li) => [
        li.dataset.agent,
        {
          state: li.dataset.state,
          text: li.querySelector('.pstate') ? li.querySelector('.pstate').textContent : '',
          tags: li.querySelector('.tags') ? li.querySelector('.tags').textContent : '',
          title: li.title,
        },
      ]),
    ),
  );

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--disable-background-networking', '--disable-component-update', '--no-first-run', '--disable-sync'],
});
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 }, deviceScaleFactor: 1 });
  const problems = [];
  page.on('pageerror', (e) => problems.push('page error: ' + e.message));
  page.on('console', (m) => {
    if (m.type() === 'error') problems.push('console error: ' + m.text());
  });
  await page.goto(base + '/ui', { waitUntil: 'load' });
  await page.fill('#token', token);
  await page.click('#login-form button[type=submit]');
  await page.waitForSelector('#conn[data-state="live"]', { timeout: 15000 });
  await page.waitForSelector('#agents li.agent[data-state="working"]', { timeout: 15000 });
  const before = await rows(page);
  await shot(page, 'presence-1280x800');

  // A state change arrives over the stream, without a reload.
  console.log('WANT change');
  await nextLine();
  await page.waitForSelector('#agents li.agent[data-agent="bob"][data-state="working"]', { timeout: 10000 });
  const after = await rows(page);

  // The phone: the agents are in the drawer.
  await page.setViewportSize({ width: 390, height: 844 });
  await page.waitForTimeout(250);
  await page.click('#side-toggle');
  await page.waitForFunction(() => document.getElementById('side').getBoundingClientRect().left >= 0);
  await page.locator('#agents').scrollIntoViewIfNeeded();
  await page.waitForTimeout(250);
  const phone = await page.evaluate(() => {
    const vw = innerWidth;
    const cut = [...document.querySelectorAll('#agents li.agent .pstate')].filter((n) => n.getBoundingClientRect().right > vw + 0.5).length;
    return { scroll: document.documentElement.scrollWidth, vw, cut };
  });
  if (phone.scroll > phone.vw || phone.cut) fail('the agents list does not fit a phone: ' + JSON.stringify(phone));
  await shot(page, 'presence-390x844');
  if (problems.length) fail(problems.join('; '));
  console.log('RESULT ' + JSON.stringify({ before, after }));
} finally {
  await browser.close();
  lines.close();
}
