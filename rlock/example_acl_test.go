package rlock_test

import (
	"fmt"
	"strings"

	"github.com/relock-go/relock/rlock"
)

// ACLRule gives the rights of a lock user, for ACL SETUSER; each application its own prefix
// and its own user.
func ExampleACLRule() {
	rule := rlock.ACLRule("billing:")
	fmt.Println("ACL SETUSER billing-locks on >secret " + strings.Join(strings.Fields(rule)[:7], " ") + " ...")
	fmt.Println(strings.Contains(rule, " +evalsha "), strings.Contains(rule, "+@all"))
	// Output:
	// ACL SETUSER billing-locks on >secret resetkeys resetchannels ~{billing:* ~billing:* &{billing:* &billing:* -@all ...
	// true false
}
