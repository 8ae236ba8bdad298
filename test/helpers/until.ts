// Polling for a condition a test cannot be told about (a file, a process, a log line on a pipe).

/** Whether `cond` held within `ms`, looked at every `everyMs`. */
export async function until(cond: () => boolean, ms: number, everyMs = 25): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (!cond() && Date.now() < deadline) await new Promise((r) => setTimeout(r, everyMs));
  return cond();
}
