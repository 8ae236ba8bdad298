# Seccomp corpus: what customers run with sh + coreutils. Prints a fixed
# transcript ending in SH-OK; runs in $CORPUS_DIR (default /tmp).
set -e
cd "$(mktemp -d "${CORPUS_DIR:-/tmp}/corpus-XXXXXX")"
umask 022
mkdir -p w/a/b
echo "hello world" > w/a/f1
printf 'c\nb\na\nb\n' > w/list
cat w/a/f1 >> w/a/f2
cp w/a/f1 w/a/b/f3
mv w/a/b/f3 w/a/b/f4
ln -s ../f1 w/a/b/link
cat w/a/b/link
ls -l w/a/b/link | sed 's/.* -> //'
ln w/a/f1 w/a/hard && cat w/a/hard && rm w/a/hard
ls w/a/b | tr '\n' ' '; echo
ls -l w/a/f1 | cut -c1-10
sort w/list | uniq | tr '\n' ' '; echo
wc -l < w/list
grep -c b w/list
sed 's/world/capsule/' w/a/f1
awk '{ print $2, length($1) }' w/a/f1
head -n 1 w/list; tail -n 1 w/list
tar -czf w.tgz w
mkdir x && tar -xzf w.tgz -C x && cat x/w/a/b/f4
gzip -k w/list && gzip -dc w/list.gz | wc -l
sha512sum w/a/f1 | cut -c1-16
find w -type f | sort | tr '\n' ' '; echo
[ "$(date -u +%Y)" -ge 2024 ] && echo date-ok
env | grep -c '^PATH='
sleep 0.1
sleep 30 & pid=$!
kill "$pid"; wait "$pid" || echo "child killed: $?"
[ "$$" -gt 1 ] && [ "$PPID" -ge 0 ] && echo pid-ok
(cd w/a && pwd | sed 's|.*/w/|w/|')
echo "$(echo sub-$(echo shell))"
chmod 600 w/a/f1 && ls -l w/a/f1 | cut -c1-10
touch -d '2020-01-01 00:00:00' w/a/f2 && date -u -r w/a/f2 +%Y
rm -rf w x w.tgz
[ ! -e w ] && echo removed
echo SH-OK
