// The library's sign-in (docs/LIBRARY.md, "Signing in from a program") under a name this module
// can use: its own name is `FirebaseAuth`, as the struct's is.
import struct FirebaseStore.FirebaseAuth

typealias LibrarySignIn = FirebaseAuth
