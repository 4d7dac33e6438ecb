"""What people read: terminal tables (`terminal`), the HTML report (`html`) and its SVG charts (`charts`)."""
