// Drives the board app under an independent MCP Apps host, the MCP
// Inspector (npm @modelcontextprotocol/inspector), in headless Chromium.
// Run by tests/inspector.rs with:
//   CHATROOM_INSPECTOR_URL  the Inspector's web address (connected to the
//                           server with the bearer header it sends itself)
//   CHATROOM_APP_SHOTS      the folder for the screenshots
//   NODE_PATH               the folder holding playwright-core
// At 1280 px: connect, open the Apps tab, open show_board's app, wait for
// the board, claim a task with the app's own button, see it move. Then the
// app's frame at 390 px. Prints "RESULT <json>"; any failure exits non-zero.
import { createRequire } from 'node:module';
import path from 'node:path';

const require = createRequire(import.meta.url);
const { chromium } = require('playwright-core');
const url = process.env.CHATROOM_INSPECTOR_URL;
const shots = process.env.CHATROOM_APP_SHOTS;

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-features=IsolateSandboxedIframes'],
});
const out = {};
const problems = [];
function fail(msg) {
  console.error('FAIL ' + msg);
  process.exit(1);
}
/** The frame (at any depth) that holds the board app, once it is ready. */
async function appFrame(page) {
  const deadline = Date.now() + 30000;
  while (Date.now() < deadline) {
    for (const f of page.frames()) {
      if (await f.$('body[data-ready="true"]').catch(() => null)) return f;
    }
    await page.waitForTimeout(200);
  }
  fail('the board app never became ready inside the Inspector');
}
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 }, deviceScaleFactor: 1 });
  page.on('pageerror', (e) => problems.push('page error: ' + e.message));
  await page.goto(url);
  await page.locator('input[role=switch], input[type=checkbox]').first().click({ force: true });
  await page.getByText('Connected', { exact: true }).first().waitFor({ timeout: 20000 });
  out.protocol = (await page.getByText(/MCP \d{4}-\d{2}-\d{2}/).first().textContent()).trim();
  await page.getByText('Apps', { exact: true }).first().click();
  const apps = await page.getByRole('button', { name: /^(show_board|board_)/ }).allTextContents();
  out.apps = apps.map((t) => t.split(/(?=[A-Z])/)[0]);
  await page.getByRole('button', { name: /^show_board/ }).click();
  await page.getByRole('button', { name: /Open App/ }).click();
  const app = await appFrame(page);
  await app.waitForSelector('#board .card', { timeout: 20000 });
  out.cards = await app.locator('#board .card').count();
  await page.waitForTimeout(500);
  await page.screenshot({ path: path.join(shots, 'inspector-1280.png') });
  // A person's click, through the Inspector's bridge to the server.
  const card = app.locator('.col[data-status="pending"] .card').first();
  const title = (await card.locator('.card-title').textContent()).trim();
  await card.locator('button[data-act="claim"]').click();
  await app.locator('.col[data-status="in_progress"] .card', { hasText: title }).waitFor({ timeout: 20000 });
  out.claimed = title;
  await page.waitForTimeout(300);
  await page.screenshot({ path: path.join(shots, 'inspector-1280-claimed.png') });
  // The app's own layout at 390 px: the Inspector's frame around it set
  // to a phone's width.
  const outer = page.locator('iframe').first();
  await outer.evaluate((f) => { f.style.width = '390px'; f.style.maxWidth = '390px'; });
  await page.waitForTimeout(800);
  const narrow = await appFrame(page);
  out.width_390 = await narrow.evaluate(() => [window.innerWidth, document.documentElement.scrollWidth]);
  if (out.width_390[1] > out.width_390[0] + 1) fail('the app scrolls sideways at 390 px: ' + out.width_390);
  await outer.screenshot({ path: path.join(shots, 'inspector-390.png') });
  if (problems.length) fail(problems.join('\n'));
  out.ok = true;
  console.log('RESULT ' + JSON.stringify(out));
} catch (e) {
  for (const ctx of browser.contexts()) for (const p of ctx.pages()) {
    await p.screenshot({ path: path.join(shots, 'inspector-failure.png'), fullPage: true }).catch(() => {});
  }
  fail(e.stack || String(e));
} finally {
  await browser.close();
}
