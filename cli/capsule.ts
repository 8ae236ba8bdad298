#!/usr/bin/env node
// The one `capsule` CLI. Each command lives in its own module, loaded on demand
// so that `capsule verify` never pulls in the server or the database drivers.

type Command = { summary: string; load: () => Promise<{ main(argv: string[]): Promise<number> }> };

const commands: Record<string, Command> = {
  run: { summary: 'run one command in a fresh capsule and keep its proof', load: () => import('./run.js') },
  verify: { summary: 'verify proof files offline', load: () => import('./verify.js') },
  serve: { summary: 'start the control plane (and a local runner)', load: () => import('./serve.js') },
  admin: { summary: 'operator commands (set-tier)', load: () => import('./admin.js') },
  openapi: { summary: 'print the OpenAPI 3.1 document', load: () => import('./openapi.js') },
  capsulefile: { summary: 'hash or push a Capsulefile directory', load: () => import('./capsulefile.js') },
};

function usage(): string {
  const lines = Object.entries(commands).map(([name, c]) => `  capsule ${name.padEnd(12)} ${c.summary}`);
  return `usage: capsule <command> [options]\n${lines.join('\n')}\n`;
}

async function run(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === '-h' || name === '--help') {
    process.stdout.write(usage());
    return name === undefined ? 2 : 0;
  }
  const cmd = commands[name];
  if (!cmd) {
    process.stderr.write(`capsule: unknown command "${name}"\n${usage()}`);
    return 2;
  }
  return (await cmd.load()).main(rest);
}

run(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    // Last resort: one line, never a stack trace.
    process.stderr.write(`capsule: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 2;
  },
);
