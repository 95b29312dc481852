// The console's "Connect an app" in headless Chromium: sign in with an admin
// token, fill the mint form, press "Connect an app", read the code from its
// dialog; then "Signed-in apps" lists what has signed in. Run by
// tests/oauth.rs with CHATROOM_UI_URL, CHATROOM_UI_TOKEN and NODE_PATH; the
// test signs an app in with the code between the two steps (it waits for a
// line on stdin). Prints "CODE <code>" and then "RESULT <json>".
import { createRequire } from 'node:module';
import readline from 'node:readline';

const require = createRequire(import.meta.url);
const { chromium } = require('playwright-core');
const base = process.env.CHATROOM_UI_URL;
const token = process.env.CHATROOM_UI_TOKEN;
// Lines are queued as they come: the test's answer can arrive before the
// script asks for it, and a line nobody listens for would be lost.
const lines = readline.createInterface({ input: process.stdin });
const queue = [];
const waiting = [];
lines.on('line', (l) => (waiting.length ? waiting.shift()(l) : queue.push(l)));
const nextLine = () => new Promise((resolve) => (queue.length ? resolve(queue.shift()) : waiting.push(resolve)));

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--disable-background-networking',
    '--disable-component-update', '--no-first-run', '--disable-sync'],
});
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const problems = [];
  page.on('pageerror', (e) => problems.push('page error: ' + e.message));
  await page.goto(`${base}/admin`);
  await page.fill('#login-token', token);
  await page.click('#login-form button[type=submit]');
  await page.locator('#console').waitFor({ state: 'visible' });
  await page.locator('#mint-room option').first().waitFor({ state: 'attached' });
  await page.fill('#mint-agent', 'tablet');
  await page.check('#mint-readonly');
  await page.click('#connect-submit');
  const code = await page.locator('#connect-code').textContent();
  const steps = await page.locator('#connect-dialog ol').textContent();
  console.log('CODE ' + code);
  await page.click('#connect-dialog button.primary');
  await nextLine();
  await page.click('#connect-apps');
  const listed = await page.locator('#connect-apps-list').textContent();
  console.log('RESULT ' + JSON.stringify({ steps, listed, problems }));
} finally {
  await browser.close();
  lines.close();
}
