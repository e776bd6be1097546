// A hostile review of the console in a real browser: Debian's chromium
// driven by playwright-core. Run by hostile_test.go (TestBrowserHostile),
// which starts the console and an attacker's site: EVIL_SAME is on the
// console's host at another port (same site: the session cookie goes
// along), EVIL_CROSS is on another host name (cross site). Each step
// prints "ok: ..." or throws; the exit status says which.
"use strict";
const { chromium } = require("playwright-core");
const path = require("path");

const env = (k) => {
  const v = process.env[k];
  if (!v) { throw new Error(`${k} is not set`); }
  return v;
};
const BASE = env("CONSOLE_URL");
const EVIL_SAME = env("EVIL_SAME");
const EVIL_CROSS = env("EVIL_CROSS");
const STATE = env("STATE_URL");

function check(cond, what) {
  if (!cond) { throw new Error("failed: " + what); }
  console.log("ok: " + what);
}

async function status() {
  const r = await fetch(STATE);
  return (await r.text()).trim();
}

(async () => {
  const ctx = await chromium.launchPersistentContext(path.join(env("PROFILE_DIR"), "reviewer"), {
    executablePath: env("CHROMIUM"),
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
      "--disable-component-update", "--disable-sync", "--no-first-run"],
  });
  const dialogs = [];
  try {
    const page = await ctx.newPage();
    page.on("dialog", (d) => { dialogs.push(d.message()); d.dismiss().catch(() => {}); });

    // A link to the login form whose next is another site in disguise, and
    // one that tries to break out of the hidden field.
    await page.goto(BASE + "/login?next=" + encodeURIComponent('/"><script>window.__pwned=1</script>'));
    check(await page.evaluate(() => window.__pwned === undefined), "a next that breaks out of the login form's field runs nothing");
    const disguised = "/\t/" + new URL(EVIL_SAME).host + "/landed";
    await page.goto(BASE + "/login?next=" + encodeURIComponent(disguised));
    await page.fill("#token", env("WRITE_TOKEN"));
    await page.click("form[action='/login'] button[type=submit]");
    await page.waitForURL((u) => !u.href.startsWith(BASE + "/login"), { timeout: 15000, waitUntil: "commit" }).catch(() => {});
    await page.waitForLoadState("domcontentloaded").catch(() => {});
    check(page.url().startsWith(BASE + "/"), "a login whose next is /<tab>/<another site> stays on the console (at " + page.url() + ")");

    // The reviewer is logged in; the attacker's pages try to act with
    // that session: a form that approves the rug pull the hostile server
    // knows the hash of, posted from a page on the same site and from one
    // on another site.
    check(await status() === "changed", "acme/notes is changed before the attack");
    for (const [evil, what] of [[EVIL_SAME, "same-site"], [EVIL_CROSS, "cross-site"]]) {
      const p = await ctx.newPage();
      p.on("dialog", (d) => { dialogs.push(d.message()); d.dismiss().catch(() => {}); });
      const done = p.waitForNavigation({ timeout: 15000 }).catch(() => null);
      await p.goto(evil + "/csrf");
      const nav = await done;
      check(nav !== null, `the ${what} forged form was sent`);
      await p.waitForLoadState("domcontentloaded");
      // The forged form landed on the console's refusal.
      const body = await p.content();
      check(/csrf_invalid|unauthenticated/.test(body), `the console refused the ${what} forged approve (${p.url()}: ${(body.match(/csrf_invalid|unauthenticated|[a-z_]+_[a-z]+/) || [""])[0]})`);
      check(await status() === "changed", `a ${what} forged approve left acme/notes changed`);
      check(!/approved by alice/.test(body), `the ${what} forged approve was not carried out`);
      // The console in a frame of the attacker's page (clickjacking).
      await p.goto(evil + "/frame");
      await p.waitForLoadState("load");
      // A fetch with the session's cookie from the attacker's page.
      check(p.url().startsWith(evil), `on the ${what} page (${p.url()})`);
      const fetched = await p.evaluate(async (u) => {
        try {
          const r = await fetch(u + "/servers/acme/notes/quarantine", { method: "POST", credentials: "include",
            headers: { "Content-Type": "application/x-www-form-urlencoded" }, body: "reason=pwned", mode: "no-cors" });
          return r.type;
        } catch (e) { return "error " + e; }
      }, BASE);
      check(await status() === "changed", `a ${what} fetch with credentials did not quarantine acme/notes (${fetched})`);
      const frames = p.frames().filter((f) => f !== p.mainFrame());
      check(frames.length === 1, `the ${what} page has its frame`);
      let inner = "";
      try { inner = await frames[0].evaluate(() => document.body ? document.body.innerText : ""); } catch (e) { inner = ""; }
      check(!/Fleet|acme|Log out/.test(inner), `the console does not draw in a ${what} frame (${frames[0].url()})`);
      await p.close();
    }
    check(dialogs.length === 0, "no script of the attacker ran (dialogs: " + JSON.stringify(dialogs) + ")");
  } finally {
    await ctx.close();
  }
})().catch((e) => { console.error(String(e && e.stack || e)); process.exit(1); });
