// The review console in a real browser: Debian's chromium driven by
// playwright-core. Run by browser_test.go, which starts the console and
// passes its address, the tokens and a control endpoint in the environment.
// Each step prints "ok: ..." or throws; the exit status says which.
"use strict";
const { chromium } = require("playwright-core");
const path = require("path");

const env = (k) => {
  const v = process.env[k];
  if (!v) { throw new Error(`${k} is not set`); }
  return v;
};
const BASE = env("CONSOLE_URL");
const CONTROL = env("CONTROL_URL");
const H2 = env("H2");
const H3 = env("H3");

function check(cond, what) {
  if (!cond) { throw new Error("failed: " + what); }
  console.log("ok: " + what);
}

async function login(page, token) {
  await page.goto(BASE + "/");
  check(page.url().startsWith(BASE + "/login"), "an unauthenticated visit is sent to the login form");
  await page.fill("#token", token);
  await Promise.all([page.waitForNavigation(), page.click("form[action='/login'] button[type=submit]")]);
  await page.waitForLoadState("domcontentloaded");
}

async function control(what) {
  const r = await fetch(CONTROL + "/" + what, { method: "POST" });
  if (!r.ok) { throw new Error(`control ${what}: ${r.status} ${await r.text()}`); }
}

(async () => {
  // Each role gets its own browser with a fresh profile (user data dir),
  // so that their sessions are apart.
  const contexts = [];
  const open = async (name) => {
    const ctx = await chromium.launchPersistentContext(path.join(env("PROFILE_DIR"), name), {
      executablePath: env("CHROMIUM"),
      headless: true,
      viewport: { width: 1440, height: 900 },
      args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"],
    });
    contexts.push(ctx);
    return ctx;
  };
  const dialogs = [];
  const pageErrors = [];
  const cspViolations = [];
  const watch = (page) => {
    page.on("dialog", (d) => { dialogs.push(d.message()); d.dismiss().catch(() => {}); });
    page.on("pageerror", (e) => pageErrors.push(String(e)));
    page.on("console", (m) => { if (/Content Security Policy/i.test(m.text())) { cspViolations.push(m.text()); } });
  };
  try {
    // --- a writer: the rug pull, live; the review; a stale approve; the approve.
    const writer = await open("writer");
    const page = await writer.newPage();
    watch(page);
    await login(page, env("WRITE_TOKEN"));
    check(await page.textContent("h1") === "Fleet", "the writer lands on the fleet page");
    await page.waitForSelector("body[data-live-ready='1']", { timeout: 30000 });
    check(true, "the fleet page listens to the verdict stream");
    check(await page.isVisible("tr[data-tenant='acme'][data-server='notes'][data-status='verified']"), "acme/notes is verified");
    await page.evaluate(() => { window.__sameDocument = true; });
    await control("rugpull");
    await page.waitForSelector("tr[data-tenant='acme'][data-server='notes'][data-status='changed']", { timeout: 30000 });
    check(await page.evaluate(() => window.__sameDocument === true), "the rug pull appeared on the fleet page live, without a reload");
    const changedCount = await page.textContent(".count.st-changed b");
    check(changedCount.trim() === "2", "the counts at the top follow (2 changed)");
    await page.screenshot({ path: path.join(env("IMAGES_DIR"), "console-fleet.png"), fullPage: true });

    await Promise.all([page.waitForNavigation(), page.click("tr[data-server='notes'][data-tenant='acme'] a")]);
    check(page.url().endsWith("/servers/acme/notes"), "the review page opens from the fleet");
    const item = page.locator(".item[data-name='read_note']");
    const left = await item.locator("tr[data-path='description'] td.left").innerText();
    const right = await item.locator("tr[data-path='description'] td.right").innerText();
    check(left.trim() === "Read one note by its id.", "the approved description is on the left");
    check(right.includes("~/.ssh/id_rsa") && right.includes("<IMPORTANT>"), "the live description, payload and all, is on the right, as text");
    check(await item.locator("tr[data-path='description'] td.right .frag.ins").count() > 0, "the inserted words are highlighted");
    check(await item.locator("tr[data-path='description'] td.right .marker.mk-secret_path").count() > 0, "the secret path marker is highlighted where it occurs");
    check(await item.locator("tr[data-path='description'] td.right .marker.mk-hidden_instructions").count() > 0, "the hidden instructions marker is highlighted where it occurs");
    check(await item.locator("tr.m-added[data-path='inputSchema.properties.context']").count() === 1, "the added parameter is marked in the schema tree");
    check(await item.locator(".badge.kind-param_added_required").count() === 1, "the classified kinds are badges");
    check(await page.locator(".item[data-name='export_notes'] .badge.kind-destructive_tool_added").count() === 1, "the added destructive tool is listed");
    check(await page.getAttribute("form.approve input[name=hash]", "value") === H2, "the approve form carries the live hash on screen");
    await page.screenshot({ path: path.join(env("IMAGES_DIR"), "console-review.png"), fullPage: true });

    await control("move"); // the server moves on while the reviewer reads
    await Promise.all([page.waitForNavigation(), page.click("form.approve button[type=submit]")]);
    check(await page.getAttribute(".error", "data-code") === "stale_hash", "a stale approve is refused (stale_hash)");
    check((await page.textContent(".error")).includes("changed since this page was drawn"), "the page says why");
    check(await page.getAttribute("form.approve input[name=hash]", "value") === H3, "the page is redrawn with the new live hash");
    check(await page.locator(".item[data-name='purge_notes']").count() === 1, "the redrawn review shows the new tool");

    // --- one item approved alone: its own form, bound to the live hash.
    const purge = page.locator(".item[data-name='purge_notes'] form.approve-item");
    check(await purge.locator("input[name=item]").getAttribute("value") === "tool:purge_notes", "each item of the diff has its own approve form, naming it");
    check(await purge.locator("input[name=hash]").getAttribute("value") === H3, "the item's form carries the live hash on screen");
    await Promise.all([page.waitForNavigation(), purge.locator("button[type=submit]").click()]);
    check((await page.textContent(".note")).includes("Approved the item"), "the page says the item was approved");
    check((await page.textContent("#server-status")).trim() === "changed", "the server stays changed: other differences remain");
    check(await page.locator(".item[data-name='purge_notes']").count() === 0, "the approved item is no longer a difference");
    check(await page.locator(".item[data-name='read_note'] form.approve-item").count() === 1, "the items left keep their forms");
    await Promise.all([page.waitForNavigation(), page.click("form.approve button[type=submit]")]);
    check((await page.textContent("#server-status")).trim() === "verified", "after the approve the server is verified");
    check((await page.textContent(".note")).includes("Approved"), "the page says it was approved");

    // --- the risk form: a tightening, then a forged one refused for its CSRF token.
    await page.selectOption("form.risk select[name=band]", "high");
    await page.selectOption("form.risk select[name=mode]", "quarantine");
    await page.fill("form.risk input[name=reason]", "vendor under review");
    await Promise.all([page.waitForNavigation(), page.click("form.risk button[type=submit]")]);
    check((await page.textContent(".note")).includes("Risk set"), "the page says the risk was set");
    const riskNote = await page.textContent(".risk-note");
    check(riskNote.includes("high") && riskNote.includes("quarantine") && riskNote.includes("vendor under review"),
      "the server's risk is the one set, with its reason");
    check(await page.inputValue("form.risk select[name=mode]") === "quarantine", "the form shows the mode now set");
    await page.evaluate(() => { document.querySelector("form.risk input[name=csrf]").value = "0".repeat(64); });
    await page.selectOption("form.risk select[name=mode]", "block");
    await page.fill("form.risk input[name=reason]", "forged");
    await Promise.all([page.waitForNavigation(), page.click("form.risk button[type=submit]")]);
    check(await page.getAttribute(".error", "data-code") === "csrf_invalid", "a risk form with another CSRF token is refused (csrf_invalid)");
    await page.goto(BASE + "/servers/acme/notes");
    check((await page.textContent(".risk-note")).includes("quarantine"), "the refused form changed nothing");

    // --- hostile text: rendered as text, nothing runs.
    await page.goto(BASE + "/servers/evil/xss");
    const fetchItem = page.locator(".item[data-name='fetch']");
    const text = await fetchItem.innerText();
    check(text.includes("<script>alert(1)</script>"), "a <script> description shows as text");
    check(text.includes('"><img src=x onerror=alert(1)>'), "an attribute-breaking payload shows as text");
    check(text.includes("javascript:alert(document.cookie)"), "a javascript: URL shows as text");
    check(text.includes("⟦U+202E⟧") && text.includes("⟦U+200B⟧"), "bidi and zero-width characters are made visible");
    check(await page.locator("img").count() === 0 && await page.locator("main script").count() === 0, "no element was injected");
    check(await page.locator("a[href^='javascript']").count() === 0, "no javascript: link exists");

    // --- a reader: no buttons, and a forged POST is refused.
    const readerCtx = await open("reader");
    const reader = await readerCtx.newPage();
    watch(reader);
    await login(reader, env("READ_TOKEN"));
    await reader.goto(BASE + "/servers/evil/xss");
    check(await reader.locator("form.approve, form.approve-item, form.quarantine, form.rebaseline, form.risk, .approve-btn, .approve-item-btn, .quarantine-btn").count() === 0, "a read token sees no action buttons");
    const forged = await reader.evaluate(async (hash) => {
      const csrf = document.querySelector("input[name=csrf]").value; // the session's own, from the logout form
      const r = await fetch("/servers/evil/xss/approve", { method: "POST", headers: { "Accept": "text/html" },
        body: new URLSearchParams({ csrf, hash, variant: "v0" }) });
      return { status: r.status, code: r.headers.get("X-Mcpdrift-Error") };
    }, H2);
    check(forged.status === 403 && forged.code === "forbidden", `a read token's forged POST is refused (${forged.status} ${forged.code})`);

    check(dialogs.length === 0, "no dialog ever opened (" + dialogs.join(", ") + ")");
    check(pageErrors.length === 0, "no script error (" + pageErrors.join("; ") + ")");
    check(cspViolations.length === 0, "no CSP violation (" + cspViolations.join("; ") + ")");
  } finally {
    for (const ctx of contexts) { await ctx.close(); }
  }
})().catch((e) => { console.error(String(e && e.stack || e)); process.exit(1); });
