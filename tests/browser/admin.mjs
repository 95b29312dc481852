// Drives the admin console in headless Chromium, as a person would: sign in
// with a whole-server admin token, create a room, mint a token, read it from
// the modal. Prints one JSON line for the Rust test (tests/admin_browser.rs),
// which then uses the token over MCP.
//
// Env: CHATROOM_TEST_NODE_MODULES (where playwright-core is installed),
// CHATROOM_URL, CHATROOM_ADMIN_TOKEN, SCREENSHOT (PNG of the mint modal) and
// optionally SCREENSHOT_PAGE (PNG of the whole console).
// Any failure exits non-zero with a message on stderr.

import { createRequire } from 'node:module';
import path from 'node:path';

const require = createRequire(import.meta.url);
const modules = process.env.CHATROOM_TEST_NODE_MODULES;
if (!modules) {
  console.error('CHATROOM_TEST_NODE_MODULES is not set');
  process.exit(2);
}
const { chromium } = require(path.join(modules, 'playwright-core'));

const base = process.env.CHATROOM_URL;
const adminToken = process.env.CHATROOM_ADMIN_TOKEN;
const screenshot = process.env.SCREENSHOT;
const ROOM = 'browser-room';
const AGENT = 'browser-bot';
// Agent-written text must come out as text, never as markup.
const HOSTILE = '<b>bold</b> <img src=x onerror="window.__xss = 1">';

function check(cond, message) {
  if (!cond) throw new Error(message);
}

const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
    '--disable-component-update', '--no-first-run', '--disable-sync'],
});
const problems = [];
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: base });
  const page = await context.newPage();
  page.setDefaultTimeout(10000);
  // CSP violations and script errors show up here.
  page.on('console', (m) => {
    // The deliberately bad sign-in (401) and room name (400) below are reported by Chromium.
    const expected = /status of 40[01] /.test(m.text());
    if (m.type() === 'error' && !expected) problems.push(`console: ${m.text()}`);
  });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('requestfailed', (r) => {
    // The hostile <img src=x> must never even be requested; anything else failing is a bug.
    problems.push(`request failed: ${r.method()} ${r.url()} ${r.failure() && r.failure().errorText}`);
  });

  await page.goto(`${base}/admin`);
  await page.locator('#login').waitFor({ state: 'visible' });
  check(await page.locator('#console').isHidden(), 'the console shows before sign-in');

  // A plain (non-admin) token is turned away with the server's reason.
  await page.fill('#login-token', 'cr_not_a_real_token_at_all_000000000000');
  await page.click('#login-form button[type=submit]');
  await page.locator('#login-error').waitFor({ state: 'visible' });

  await page.fill('#login-token', adminToken);
  await page.click('#login-form button[type=submit]');
  await page.locator('#console').waitFor({ state: 'visible' });
  check((await page.textContent('#who-agent')) === 'root', 'signed in as someone else');
  check(await page.evaluate(() => sessionStorage.getItem('chatroom-admin-token')) === adminToken,
    'the token is not in sessionStorage');
  check((await context.cookies()).length === 0, 'the console set a cookie');
  await page.locator('#posture .p-item').first().waitFor();

  // A bad room name is refused with the server's reason.
  await page.fill('#room-name', 'Bad Name');
  await page.click('#room-form button[type=submit]');
  await page.locator('#toast.error', { hasText: 'not valid' }).waitFor({ state: 'visible' });

  // Create a room whose description is hostile markup.
  await page.fill('#room-name', ROOM);
  await page.fill('#room-description', HOSTILE);
  await page.click('#room-form button[type=submit]');
  const row = page.locator(`#rooms tr[data-room="${ROOM}"]`);
  await row.waitFor();
  check((await row.locator('td.desc').textContent()) === HOSTILE, 'the description was not shown as text');
  check((await row.locator('td.desc b, td.desc img').count()) === 0, 'the description was rendered as HTML');
  check(await page.evaluate(() => window.__xss === undefined), 'hostile markup ran');

  if (process.env.SCREENSHOT_PAGE) await page.screenshot({ path: process.env.SCREENSHOT_PAGE, fullPage: true });

  // Mint a token for it.
  await page.fill('#mint-agent', AGENT);
  await page.selectOption('#mint-room', ROOM);
  await page.fill('#mint-skills', 'testing, review');
  await page.check('#mint-lead');
  await page.click('#mint-submit');
  const dialog = page.locator('#mint-dialog');
  await dialog.waitFor({ state: 'visible' });
  const token = (await page.textContent('#mint-token')).trim();
  check(token.startsWith('cr_'), `no token in the modal: ${token}`);

  const lanAdd = await page.textContent('#mint-setup pre[data-key="claude_mcp_add"]');
  check(lanAdd.includes(`chatroom-${ROOM} ${base}/mcp`) && lanAdd.includes(`Bearer ${token}`),
    `the LAN claude mcp add line is wrong: ${lanAdd}`);
  const keys = await page.$$eval('#mint-setup pre', (els) => els.map((e) => e.dataset.key));
  for (const k of ['claude_mcp_add', 'mcp_json', 'hook_env', 'hook_settings', 'hook_curl', 'brief', 'cli']) {
    check(keys.includes(k), `the setup lacks ${k}`);
  }
  const brief = await page.textContent('#mint-setup pre[data-key="brief"]');
  check(brief.includes(`agent "${AGENT}"`) && !brief.includes(token), 'the brief is wrong');

  // The copy button puts the line on the clipboard.
  await page.locator('#mint-setup .block').first().locator('button').click();
  const copied = await page.evaluate(() => navigator.clipboard.readText());
  check(copied === lanAdd, `the copy button copied ${JSON.stringify(copied)}`);

  await page.click('#tab-remote');
  await page.locator('#tab-remote[aria-selected="true"]').waitFor();
  const remoteAdd = await page.textContent('#mint-setup pre[data-key="claude_mcp_add"]');
  check(remoteAdd.includes(`Bearer ${token}`), 'the remote tab lacks the token');
  await page.click('#tab-lan');
  await page.locator('#tab-lan[aria-selected="true"]').waitFor();

  if (screenshot) await page.screenshot({ path: screenshot });

  // Shown once: closing forgets it; the token list shows the agent, never the token.
  await page.click('#mint-dialog [data-close]');
  await dialog.waitFor({ state: 'hidden' });
  // The dialog's `close` event (which forgets the token) comes a task after it hides.
  await page.waitForFunction(() => document.getElementById('mint-token').textContent === '', null, { timeout: 5000 })
    .catch(() => check(false, 'the token stayed in the page'));
  await page.locator(`#tokens tr[data-agent="${AGENT}"]`).waitFor();
  check(!(await page.content()).includes(token), 'the page still holds the token');
  await page.locator('#log tr', { hasText: 'token.mint' }).first().waitFor();

  // "Connect an app" from a loopback address with no CHATROOM_PUBLIC_URL:
  // the dialog warns that claude.ai needs the public URL.
  await page.fill('#mint-agent', 'phone-app');
  await page.click('#connect-submit');
  await page.locator('#connect-code').waitFor({ state: 'visible' });
  const warning = await page.textContent('#connect-public-warning');
  check(warning.includes('claude.ai') && warning.includes('CHATROOM_PUBLIC_URL'), `no public-URL warning: ${warning}`);
  await page.click('#connect-dialog button.primary');
  await page.locator('#connect-dialog').waitFor({ state: 'hidden' });
  await page.fill('#mint-agent', '');

  // On a phone (390 px): the top bar's links and buttons do not overlap,
  // nothing scrolls the page sideways, and every revoke button is on screen.
  await page.setViewportSize({ width: 390, height: 844 });
  await page.locator('#to-dashboard').waitFor({ state: 'visible' });
  const phone = await page.evaluate(() => {
    const box = (id) => document.getElementById(id).getBoundingClientRect();
    const overlap = (a, b) => a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
    const bar = ['to-dashboard', 'who-agent', 'refresh', 'logout'].map(box);
    const clashes = [];
    for (let i = 0; i < bar.length; i++) for (let j = i + 1; j < bar.length; j++) if (overlap(bar[i], bar[j])) clashes.push(i + '/' + j);
    const revokes = [...document.querySelectorAll('#tokens button.danger')].map((b) => b.getBoundingClientRect());
    return {
      clashes,
      sideways: document.documentElement.scrollWidth > window.innerWidth,
      revokes: revokes.length,
      offscreen: revokes.filter((r) => r.right > window.innerWidth || r.left < 0).length,
    };
  });
  check(phone.clashes.length === 0, `the top bar overlaps at 390 px: ${phone.clashes}`);
  check(!phone.sideways, 'the console scrolls sideways at 390 px');
  check(phone.revokes > 0 && phone.offscreen === 0, `revoke buttons off-screen at 390 px: ${JSON.stringify(phone)}`);
  if (process.env.SCREENSHOT_PAGE) await page.screenshot({ path: process.env.SCREENSHOT_PAGE.replace(/\.png$/, '-390.png'), fullPage: true });
  await page.setViewportSize({ width: 1280, height: 900 });

  // Deleting a room needs its name typed again.
  await page.fill('#room-name', 'scratch');
  await page.click('#room-form button[type=submit]');
  const scratch = page.locator('#rooms tr[data-room="scratch"]');
  await scratch.waitFor();
  await scratch.locator('button.danger').click();
  await page.locator('#confirm-dialog').waitFor({ state: 'visible' });
  check(await page.isDisabled('#confirm-ok'), 'delete is possible without typing the name');
  await page.fill('#confirm-input', 'scratch');
  await page.click('#confirm-ok');
  await scratch.waitFor({ state: 'detached' });

  // The console and the dashboard share one look and link to each other:
  // the dashboard opens with the console's token, and links back.
  await page.locator('#to-dashboard').waitFor({ state: 'visible' });
  await page.emulateMedia({ colorScheme: 'dark' });
  if (process.env.SCREENSHOT_PAGE) await page.screenshot({ path: process.env.SCREENSHOT_PAGE.replace(/\.png$/, '-dark.png') });
  const light = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  await page.click('#to-dashboard');
  await page.waitForURL(`${base}/ui**`);
  await page.locator('#conn[data-state="live"]').waitFor();
  await page.locator('#to-console').waitFor({ state: 'visible' });
  const dash = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  check(dash === light, `the dashboard and the console differ in look: ${dash} vs ${light}`);
  await page.emulateMedia({ colorScheme: 'light' });

  check(problems.length === 0, `browser problems:\n${problems.join('\n')}`);
  process.stdout.write(`${JSON.stringify({ token, claude_mcp_add: lanAdd })}\n`);
} catch (e) {
  console.error(e.stack || String(e));
  if (problems.length) console.error(problems.join('\n'));
  process.exitCode = 1;
} finally {
  await browser.close();
}
