// Placeholder until the serve command lands.
export async function main(_argv: string[]): Promise<number> {
  process.stderr.write('capsule serve: not available yet\n');
  return 2;
}
