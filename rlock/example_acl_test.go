package rlock_test

import (
	"fmt"
	"strings"

	"github.com/relock-go/relock/rlock"
)

// ACLRule gives the rights of a lock user, for ACL SETUSER; each application its own prefix
// and its own user. A prefix that a printed rule cannot carry is refused.
func ExampleACLRule() {
	rule, err := rlock.ACLRule("billing:")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("ACL SETUSER billing-locks on >secret " + strings.Join(strings.Fields(rule)[:7], " ") + " ...")
	fmt.Println(strings.Contains(rule, " +evalsha "), strings.Contains(rule, "+@all"))
	_, err = rlock.ACLRule("billing team:")
	fmt.Println(err)
	// Output:
	// ACL SETUSER billing-locks on >secret resetkeys resetchannels ~{billing:* ~billing:* &{billing:* &billing:* -@all ...
	// true false
	// rlock: invalid argument: ACL rule: key prefix "billing team:" contains whitespace (U+0020), which an ACL rule cannot carry
}
