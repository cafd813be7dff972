package dnsmsg

// ReadResolvConf is readResolvConf, for the external tests.
var ReadResolvConf = readResolvConf
