"""The test stores' harness: fake-gcs-server's batch requests get the Content-IDs it needs."""

from engines.objectstores import number_batch_parts


def test_parts_without_a_content_id_are_numbered_and_others_kept():
    body = (b'--b\nContent-Type: application/http\nMIME-Version: 1.0\n\nDELETE /o/a HTTP/1.1\n\n'
            b'--b\r\nContent-Type: application/http\r\nContent-ID: <x>\r\n\r\nDELETE /o/b HTTP/1.1\r\n\r\n'
            b'--b\nContent-Type: application/http\nMIME-Version: 1.0\n\nDELETE /o/c HTTP/1.1\n\n--b--')
    fixed = number_batch_parts(body)
    assert fixed.count(b'Content-ID: <1>\n') == 1 and fixed.count(b'Content-ID: <2>\n') == 1
    assert b'Content-ID: <x>\r\n' in fixed and fixed.count(b'Content-ID') == 3
    assert number_batch_parts(fixed) == fixed
