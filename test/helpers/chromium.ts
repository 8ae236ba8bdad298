// Debian's Chromium, headless, driven over the DevTools protocol with Node's
// built-in WebSocket client (one browser per test file, one page per call).
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const CHROMIUM = process.env.CHROMIUM_BIN ?? '/usr/bin/chromium';

type Pending = { resolve: (v: any) => void; reject: (e: Error) => void };

export class Browser {
  private id = 0;
  private pending = new Map<number, Pending>();
  private constructor(
    private readonly proc: ChildProcess,
    private readonly ws: WebSocket,
    private readonly profile: string,
  ) {
    ws.addEventListener('message', (ev) => {
      const m = JSON.parse(String(ev.data));
      const p = m.id !== undefined ? this.pending.get(m.id) : undefined;
      if (!p) return;
      this.pending.delete(m.id);
      if (m.error) p.reject(new Error(`${m.error.message} ${m.error.data ?? ''}`));
      else p.resolve(m.result);
    });
  }

  static async launch(): Promise<Browser> {
    const profile = mkdtempSync(join(tmpdir(), 'chromium-'));
    const proc = spawn(
      CHROMIUM,
      [
        '--headless=new',
        '--no-sandbox',
        '--disable-gpu',
        '--no-first-run',
        '--remote-debugging-port=0',
        `--user-data-dir=${profile}`,
        'about:blank',
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    const url = await new Promise<string>((resolve, reject) => {
      let err = '';
      const timer = setTimeout(() => reject(new Error(`chromium did not start: ${err.slice(-2000)}`)), 60_000);
      proc.stderr!.on('data', (b: Buffer) => {
        err += b.toString();
        const m = /DevTools listening on (ws:\/\/\S+)/.exec(err);
        if (m?.[1]) {
          clearTimeout(timer);
          resolve(m[1]);
        }
      });
      proc.once('exit', (c) => reject(new Error(`chromium exited ${c}: ${err.slice(-2000)}`)));
    });
    proc.stderr!.resume();
    const ws = new WebSocket(url);
    await new Promise<void>((resolve, reject) => {
      ws.addEventListener('open', () => resolve(), { once: true });
      ws.addEventListener('error', () => reject(new Error('DevTools WebSocket failed')), { once: true });
    });
    return new Browser(proc, ws, profile);
  }

  send(method: string, params: Record<string, unknown> = {}, sessionId?: string): Promise<any> {
    const id = ++this.id;
    this.ws.send(JSON.stringify({ id, method, params, ...(sessionId ? { sessionId } : {}) }));
    return new Promise((resolve, reject) => this.pending.set(id, { resolve, reject }));
  }

  async newPage(): Promise<Page> {
    const { targetId } = await this.send('Target.createTarget', { url: 'about:blank' });
    const { sessionId } = await this.send('Target.attachToTarget', { targetId, flatten: true });
    const page = new Page(this, sessionId, targetId);
    await page.send('Page.enable');
    await page.send('Network.enable');
    return page;
  }

  async close(): Promise<void> {
    this.ws.close();
    const exited = new Promise<void>((r) => this.proc.once('exit', () => r()));
    this.proc.kill('SIGTERM');
    const t = setTimeout(() => this.proc.kill('SIGKILL'), 5000);
    await exited;
    clearTimeout(t);
    rmSync(this.profile, { recursive: true, force: true });
  }
}

export class Page {
  constructor(
    private readonly browser: Browser,
    private readonly sessionId: string,
    readonly targetId: string,
  ) {}

  send(method: string, params: Record<string, unknown> = {}): Promise<any> {
    return this.browser.send(method, params, this.sessionId);
  }

  /** Evaluates an expression in the page (awaiting a promise) and returns its JSON value. */
  async eval<T = unknown>(expression: string): Promise<T> {
    const r = await this.send('Runtime.evaluate', { expression, awaitPromise: true, returnByValue: true });
    if (r.exceptionDetails)
      throw new Error(`page: ${r.exceptionDetails.exception?.description ?? r.exceptionDetails.text}`);
    return r.result.value as T;
  }

  async waitFor(expression: string, timeoutMs = 20_000): Promise<void> {
    const end = Date.now() + timeoutMs;
    while (!(await this.eval<boolean>(`Boolean(${expression})`))) {
      if (Date.now() > end) throw new Error(`timed out waiting for ${expression}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  async goto(url: string): Promise<void> {
    await this.send('Page.navigate', { url });
    await this.waitFor("document.readyState === 'complete' && document.body && document.body.dataset.ready === 'true'");
  }

  async offline(on: boolean): Promise<void> {
    await this.send('Network.emulateNetworkConditions', {
      offline: on,
      latency: 0,
      downloadThroughput: -1,
      uploadThroughput: -1,
    });
  }

  async screenshot(): Promise<Buffer> {
    const r = await this.send('Page.captureScreenshot', { format: 'png', captureBeyondViewport: true });
    return Buffer.from(r.data, 'base64');
  }
}
