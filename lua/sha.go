package lua

// SHA1 is the SHA1 of the form [Script.Lua] runs for flags (the flagged text when flags is
// true and the script has a shebang, else the plain one), for callers that build their own
// EVALSHA to send several scripts in one pipeline; on NOSCRIPT they send [Script.Text] with
// EVAL.
func (s *Script) SHA1(flags bool) string {
	if flags && s.flagged != nil {
		return s.fsha
	}
	return s.sha
}

// Text is the text of the form [Script.Lua] runs for flags (see [Script.SHA1]).
func (s *Script) Text(flags bool) string {
	if flags && s.flagged != nil {
		return s.src
	}
	return s.PlainSource()
}
