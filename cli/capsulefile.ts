// Placeholder until the capsulefile command lands.
export async function main(_argv: string[]): Promise<number> {
  process.stderr.write('capsule capsulefile: not available yet\n');
  return 2;
}
