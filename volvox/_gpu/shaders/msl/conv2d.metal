#pragma clang diagnostic ignored "-Wmissing-prototypes"

#include <metal_stdlib>
#include <simd/simd.h>

using namespace metal;

struct _4
{
    uint _m0;
    uint _m1;
    uint _m2;
    uint _m3;
    uint _m4;
    uint _m5;
    uint _m6;
    uint _m7;
    uint _m8;
    uint _m9;
    uint _m10;
    uint _m11;
    uint _m12;
    uint _m13;
    uint _m14;
    uint _m15;
    uint _m16;
    uint _m17;
    uint _m18;
};

struct _9
{
    float _m0[1];
};

struct _12
{
    float _m0[1];
};

struct _15
{
    float _m0[1];
};

struct _18
{
    float _m0[1];
};

struct _21
{
    _4 _m0;
};

static inline __attribute__((always_inline))
uint _23(uint _25, uint _26)
{
    return _25 % ((_26 == 0u) ? 1u : _26);
}

static inline __attribute__((always_inline))
uint _34(uint _35, uint _36)
{
    return _35 / ((_36 == 0u) ? 1u : _36);
}

kernel void main0(const device _9& _8 [[buffer(0)]], const device _12& _11 [[buffer(1)]], const device _15& _14 [[buffer(2)]], device _18& _17 [[buffer(3)]], const device _21& _20 [[buffer(4)]], uint3 gl_WorkGroupID [[threadgroup_position_in_grid]], uint3 gl_NumWorkGroups [[threadgroups_per_grid]], uint gl_LocalInvocationIndex [[thread_index_in_threadgroup]])
{
    float _65 = 0.0;
    uint _67 = 0u;
    uint2 _135 = uint2(4294967295u);
    uint2 _183 = uint2(4294967295u);
    uint2 _259 = uint2(4294967295u);
    uint _80 = (((gl_WorkGroupID.y * gl_NumWorkGroups.x) + gl_WorkGroupID.x) * 64u) + gl_LocalInvocationIndex;
    if (_80 >= _20._m0._m0)
    {
        return;
    }
    uint _90 = _23(_80, _20._m0._m6);
    uint _97 = _23(_34(_80, _20._m0._m6), _20._m0._m5);
    uint _107 = _23(_34(_80, _20._m0._m6 * _20._m0._m5), _20._m0._m4);
    uint _116 = _34(_80, (_20._m0._m6 * _20._m0._m5) * _20._m0._m4);
    uint _124 = _34(_90, _20._m0._m10) * _20._m0._m9;
    for (;;)
    {
        if (all(uint2(0u) == _135))
        {
            break;
        }
        _135 -= uint2(uint(_135.y == 0u), 1u);
        if (!(_67 < _20._m0._m7))
        {
            break;
        }
        uint _159 = _67;
        int _170 = int((_107 * _20._m0._m11) + (_159 * _20._m0._m13)) - int(_20._m0._m15);
        if ((_170 < 0) || (_170 >= int(_20._m0._m1)))
        {
            uint _294 = _67;
            _67 = _294 + 1u;
            continue;
        }
        uint _69 = 0u;
        for (;;)
        {
            if (all(uint2(0u) == _183))
            {
                break;
            }
            _183 -= uint2(uint(_183.y == 0u), 1u);
            if (!(_69 < _20._m0._m8))
            {
                break;
            }
            uint _207 = _69;
            int _218 = int((_97 * _20._m0._m12) + (_207 * _20._m0._m14)) - int(_20._m0._m16);
            if ((_218 < 0) || (_218 >= int(_20._m0._m2)))
            {
                uint _292 = _69;
                _69 = _292 + 1u;
                continue;
            }
            uint _241 = (((((_116 * _20._m0._m1) + uint(_170)) * _20._m0._m2) + uint(_218)) * _20._m0._m3) + _124;
            uint _254 = ((((_90 * _20._m0._m7) + _67) * _20._m0._m8) + _69) * _20._m0._m9;
            uint _71 = 0u;
            for (;;)
            {
                if (all(uint2(0u) == _259))
                {
                    break;
                }
                _259 -= uint2(uint(_259.y == 0u), 1u);
                if (!(_71 < _20._m0._m9))
                {
                    break;
                }
                _65 += (_8._m0[_241 + _71] * _11._m0[_254 + _71]);
                _71++;
                continue;
            }
            uint _292 = _69;
            _69 = _292 + 1u;
            continue;
        }
        uint _294 = _67;
        _67 = _294 + 1u;
        continue;
    }
    if (_20._m0._m17 != 0u)
    {
        _65 += _14._m0[_90];
    }
    if (_20._m0._m18 == 1u)
    {
        _65 = fast::max(_65, 0.0);
    }
    if (_20._m0._m18 == 2u)
    {
        _65 = fast::clamp(_65, 0.0, 6.0);
    }
    _17._m0[_80] = _65;
}

