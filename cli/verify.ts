// Placeholder until the verify command lands.
export async function main(_argv: string[]): Promise<number> {
  process.stderr.write('capsule verify: not available yet\n');
  return 2;
}
