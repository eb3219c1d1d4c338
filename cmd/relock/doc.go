// Command relock inspects and operates relock's locks in Redis: who holds a lock, since
// when, from which host, how many wait, how long its lease has to run.
//
// Install it with
//
//	go install github.com/relock-go/relock/cmd/relock@latest
//
// # Usage
//
//	relock inspect [flags] NAME          what Redis knows of NAME, whatever its kind
//	relock list [flags] [PATTERN]        the names matching PATTERN (a Redis glob; default *)
//	relock watch [flags] NAME            inspect NAME again every --interval until Ctrl-C
//	relock force-unlock [flags] NAME     free the lock NAME whoever holds it, and wake its waiters
//
// Flags (every command takes them, before or after its arguments, up to "--": every argument
// after "--" is NAME or PATTERN, even one that begins with "-", as in relock inspect -- -x):
//
//	--url URL          the Redis to connect to (default $RELOCK_URL, else redis://127.0.0.1:6379):
//	                   redis://[user:password@]host:port[/db] (a "/" with no db: db 0),
//	                   rediss:// for TLS, ?master_set=NAME for Sentinel (host:port a
//	                   sentinel), ?addr=host:port for more seed addresses; a Cluster is
//	                   recognised by itself
//	--cacert FILE      with rediss://, the PEM file of the CA that signed the server's
//	                   certificate (default: the system's roots)
//	--prefix PREFIX    the key prefix of the Clients that made the locks (default "relock:")
//	--pubsub MODE      auto, classic or sharded: the pub/sub mode of those Clients, for the
//	                   count of subscribers (default auto: sharded on a Cluster)
//	--json             machine-readable output: one JSON object (list: one per line)
//	--base64           NAME (list: PATTERN) is given in standard base64: the form --json
//	                   shows a name that is not UTF-8 in (see below)
//	--timeout D        bound of the connection and of each command's work: each name's
//	                   inspection by list (a name that takes longer is listed as not
//	                   inspected and the walk goes on: see below), each refresh of watch
//	                   (default 10s)
//	--walk-timeout D   list: bound of the whole walk, its inspections included (default 0:
//	                   none; the walk ends when the keyspace is walked, or at Ctrl-C)
//	--interval D       watch: time between refreshes (default 1s)
//	--count N          watch: stop after N refreshes (default 0: until interrupted)
//	--yes              force-unlock: do not ask for confirmation
//
// list prints one line per name as it finds it (SCAN order: pipe it to sort), with its
// kind, lease, holders and waiters ("?" where Redis does not record them: a semaphore's
// holders, whose count of available permits inspect shows; the waiters of a kind without a
// queue, see the subscribers of inspect), or one JSON object per line with --json (where a
// semaphore's holders are [] for the same reason). A name whose
// inspection takes longer than --timeout (a slow server, a key too large to read in time)
// does not stall the listing: it is listed with "?" and "(not inspected within --timeout
// D)", with --json as {"name":..., "error":"not inspected within --timeout D"}, told on
// stderr, and the walk goes on; list then exits with code 1. On a Cluster list walks each
// master's keyspace once (one SCAN walk per master, none of a replica).
//
// A name is any bytes, and a JSON string holds UTF-8 only: with --json a name, key or owner id
// that is not valid UTF-8 is shown as before (each byte that is not UTF-8 as U+FFFD, so two
// such names may look the same) and, in a field beside it, name_base64, key_base64 or
// owner_base64, as its exact bytes in standard base64, which --base64 takes back as NAME:
//
//	relock inspect --json NAME     {"name":"\ufffd\ufffd","name_base64":"//4=",...}   (NAME: the bytes ff fe)
//	relock inspect --base64 //4=   the same lock
//
// A valid UTF-8 text has no such field. The text output quotes such a text as Go does
// ("\xff").
//
// With --json, "token" is the fencing token of the holder (the write holder of a read-write
// lock), 0 when there is none (a lock not held, or held for reading only; a semaphore or a
// latch), and null when the lock is held but Redis does not know its token yet (a Mutex taken
// by a fast grant, until its holder's next call on it, its first renewal at the latest),
// which the text output shows as "unknown".
//
// relock reads with read-only commands only (see rlock.Client.Inspect): inspect, list and
// watch never block or slow a lock, and need no more than rlock.InspectACLRule's rights.
// force-unlock runs relock's force scripts, which publish on the lock's channel so that its
// waiters (of every Client) wake and try again; it asks for confirmation on standard input
// unless --yes is given (any answer but y or yes, the end of the input, Ctrl-C or SIGTERM
// at the question frees nothing: exit code 4), and prints what it freed. It frees only the holders it showed (or,
// with --yes, read): the force is conditional on their owners and fencing token
// (rlock.Client.ForceUnlockSeen), so a lock that changed hands meanwhile, even in the
// instant before the force, is left alone: taken by another owner, by the owner shown again
// (a new token), joined by a reader not shown, or taken as another kind of primitive. It
// then says "changed hands since it was shown: nothing freed" and exits with code 4: read
// it again (inspect) and decide again. It frees locks only (a Mutex, SpinMutex, FairMutex or
// RWMutex), never a semaphore's permits or a latch.
//
// relock writes nothing else to Redis: in particular it keeps no Client record
// (rlock.WithClientInfo).
//
// # Exit codes
//
//	0  done
//	1  failed: Redis unreachable (a rediss:// URL of a server that does not answer the TLS
//	   handshake, as a plain Redis does not, fails at --timeout or the URL's dial_timeout,
//	   saying "no answer to the TLS handshake"), a command refused (ACL), a key of another type, a name
//	   that is not a lock given to force-unlock, a name that list could not inspect
//	   within --timeout (the others listed), a list that --walk-timeout or Ctrl-C ended
//	   ("the listing is incomplete": the names found until then listed)
//	2  bad usage: an unknown command or flag, a missing or extra argument
//	3  nothing there: inspect of a name that holds nothing, or of a lock (mutex, fair_mutex,
//	   rw_mutex) that nobody holds, whatever else Redis keeps of it (its waiters: shown);
//	   force-unlock of a lock that is not held. A semaphore or latch whose key exists is
//	   there (exit 0), its permits taken or not
//	4  force-unlock not confirmed (or interrupted at the question), or the lock changed hands since its holders were read,
//	   or became another kind (nothing freed: run it again)
package main
