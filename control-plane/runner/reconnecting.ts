// RunnerPort adapter that survives a runner restart: the runner client does
// not reconnect, so on `unavailable` this drops it and the next call opens a
// new one. Listeners learn of each new connection (recovery runs again then).
import { RunnerError, type RunnerPort } from '../../shared/runner-protocol.js';

export class ReconnectingRunner implements RunnerPort {
  private client: RunnerPort | null = null;
  private generation = 0;
  private readonly listeners: (() => void)[] = [];
  private closed = false;

  constructor(private readonly connect: () => RunnerPort) {}

  /** Called when a call is about to use a fresh connection (not the first). */
  onReconnect(cb: () => void): void {
    this.listeners.push(cb);
  }

  /** The runner was restarted: drop the old connection; the next call opens a new one (listeners run then). */
  reconnect(): void {
    const c = this.client;
    this.client = null;
    void c?.close().catch(() => undefined);
  }

  private current(): RunnerPort {
    if (this.closed) throw new RunnerError('unavailable', 'runner connection closed');
    if (!this.client) {
      this.client = this.connect();
      if (this.generation++ > 0) for (const cb of this.listeners) cb();
    }
    return this.client;
  }

  private async use<T>(f: (c: RunnerPort) => Promise<T>): Promise<T> {
    const c = this.current();
    try {
      return await f(c);
    } catch (e) {
      if (e instanceof RunnerError && e.code === 'unavailable' && this.client === c) {
        this.client = null;
        void c.close().catch(() => undefined);
      }
      throw e;
    }
  }

  hello() {
    return this.use((c) => c.hello());
  }
  create(req: Parameters<RunnerPort['create']>[0]) {
    return this.use((c) => c.create(req));
  }
  exec(req: Parameters<RunnerPort['exec']>[0]) {
    return this.use((c) => c.exec(req));
  }
  upload(id: string, filename: string, bytes: Uint8Array) {
    return this.use((c) => c.upload(id, filename, bytes));
  }
  listOutput(id: string) {
    return this.use((c) => c.listOutput(id));
  }
  readOutput(id: string, filename: string) {
    return this.use((c) => c.readOutput(id, filename));
  }
  destroy(id: string) {
    return this.use((c) => c.destroy(id));
  }
  list() {
    return this.use((c) => c.list());
  }
  usage(id: string) {
    return this.use((c) => {
      if (!c.usage) throw new RunnerError('internal', 'this runner does not report usage');
      return c.usage(id);
    });
  }
  async close(): Promise<void> {
    this.closed = true;
    const c = this.client;
    this.client = null;
    await c?.close();
  }
}
