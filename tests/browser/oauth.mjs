// Signs an app in through chatroom's OAuth consent page in headless Chromium
// (playwright-core, the system's /usr/bin/chromium), at a phone's width.
// Run by tests/oauth.rs, which passes:
//   CHATROOM_AUTH_URL      the authorization URL the app sent its user to
//   CHATROOM_CONNECT_CODE  the connect code to type
//   CHATROOM_REDIRECT      the app's redirect URI (a listener of the test)
//   CHATROOM_SHOT          where to save the screenshot
//   NODE_PATH              the folder holding playwright-core
// Types a wrong code first (the page must say so), then the right one, and
// prints "RESULT <json>" with the URL the browser was sent back to.
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { chromium } = require('playwright-core');

const { CHATROOM_AUTH_URL: authUrl, CHATROOM_CONNECT_CODE: code, CHATROOM_REDIRECT: redirect,
  CHATROOM_SHOT: shot } = process.env;

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--disable-background-networking',
    '--disable-component-update', '--no-first-run', '--disable-sync'],
});
try {
  const page = await browser.newPage({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true });
  const problems = [];
  page.on('pageerror', (e) => problems.push('page error: ' + e.message));
  page.on('console', (m) => { if (m.type() === 'error') problems.push('console error: ' + m.text()); });
  await page.goto(authUrl);
  const clientName = await page.textContent('#client-name');
  const returnHost = await page.textContent('#return-host');
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth > window.innerWidth);
  const styled = await page.evaluate(() => getComputedStyle(document.querySelector('#approve')).backgroundColor);
  await page.fill('#connect_code', 'crc-0000-0000-0000');
  await Promise.all([page.waitForNavigation(), page.click('#approve')]);
  const wrong = await page.textContent('#error');
  await page.fill('#connect_code', code);
  await page.screenshot({ path: shot, fullPage: true });
  await Promise.all([page.waitForURL((url) => url.href.startsWith(redirect)), page.click('#approve')]);
  const callback = page.url();
  console.log('RESULT ' + JSON.stringify({ clientName, returnHost, overflow, styled, wrong, callback, problems }));
} finally {
  await browser.close();
}
